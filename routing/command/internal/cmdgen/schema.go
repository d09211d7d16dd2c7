// Package cmdgen captures the command table of a running redis-server and
// turns it into the Go source of package command (commands_gen.go).
//
// The JSON schema below mirrors the reply of COMMAND INFO in Redis 7.0 (see the
// Redis docs "COMMAND INFO" and "Key specifications"): one object per command,
// fields in the order the server sends them, key specs kept as the server's
// nested begin_search/find_keys maps. Only the capture step talks to a server;
// generation reads the checked-in JSON and nothing else.
//
// The RESP client (Conn) and the entry decoder (DecodeCommand) are shared with
// package command's FetchInfo, which reads a running engine's table over
// RESP2, so that the capture and the runtime fetch decode entries alike.
package cmdgen

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// File is the content of testdata/commands.json.
type File struct {
	// Server is where the data came from, e.g. "redis-server 7.0.15".
	Server string `json:"server"`
	// Version is INFO server's redis_version, e.g. "7.0.15".
	Version string `json:"version"`
	// Commands are the top-level commands sorted by name.
	Commands []*Command `json:"commands"`
}

// Command is one entry of the COMMAND INFO reply.
type Command struct {
	Name          string     `json:"name"` // lower case; subcommands are "parent|sub"
	Arity         int        `json:"arity"`
	Flags         []string   `json:"flags"`
	FirstKey      int        `json:"first_key"`
	LastKey       int        `json:"last_key"`
	Step          int        `json:"step"`
	ACLCategories []string   `json:"acl_categories"`
	Tips          []string   `json:"tips"`
	KeySpecs      []*KeySpec `json:"key_specs"`
	Subcommands   []*Command `json:"subcommands"` // sorted by name
}

// KeySpec is one element of a command's key_specs.
type KeySpec struct {
	Notes       string      `json:"notes,omitempty"`
	Flags       []string    `json:"flags"`
	BeginSearch BeginSearch `json:"begin_search"`
	FindKeys    FindKeys    `json:"find_keys"`
}

// BeginSearch is the begin_search map: type "index", "keyword" or "unknown".
type BeginSearch struct {
	Type string          `json:"type"`
	Spec BeginSearchSpec `json:"spec"`
}

// BeginSearchSpec holds the fields of either begin_search type; fields that
// the type does not have are nil.
type BeginSearchSpec struct {
	Index     *int    `json:"index,omitempty"`     // type index
	Keyword   *string `json:"keyword,omitempty"`   // type keyword
	StartFrom *int    `json:"startfrom,omitempty"` // type keyword
}

// FindKeys is the find_keys map: type "range", "keynum" or "unknown".
type FindKeys struct {
	Type string       `json:"type"`
	Spec FindKeysSpec `json:"spec"`
}

// FindKeysSpec holds the fields of either find_keys type; fields that the
// type does not have are nil.
type FindKeysSpec struct {
	LastKey   *int `json:"lastkey,omitempty"`   // type range
	KeyStep   *int `json:"keystep,omitempty"`   // types range and keynum
	Limit     *int `json:"limit,omitempty"`     // type range
	KeyNumIdx *int `json:"keynumidx,omitempty"` // type keynum
	FirstKey  *int `json:"firstkey,omitempty"`  // type keynum
}

// Parse decodes a commands.json document strictly: unknown fields fail.
func Parse(data []byte) (*File, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("cmdgen: decode commands json: %w", err)
	}
	if len(f.Commands) == 0 {
		return nil, fmt.Errorf("cmdgen: commands json has no commands")
	}
	return &f, nil
}

// Marshal encodes f as indented JSON with a trailing newline.
func Marshal(f *File) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("cmdgen: encode commands json: %w", err)
	}
	return buf.Bytes(), nil
}
