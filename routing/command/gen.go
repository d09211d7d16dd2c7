//go:build ignore

// Command gen writes commands_gen.go from testdata/commands.json. With
// -capture it first refreshes testdata/commands.json from the COMMAND INFO of
// a running redis-server (the pinned version, 7.0.15):
//
//	redis-server --port 6399 --save '' --appendonly no &
//	go run gen.go -capture 127.0.0.1:6399
//	go generate   # later: regenerate from the checked-in JSON only
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/respmeter/respmeter/routing/command/internal/cmdgen"
)

func main() {
	capture := flag.String("capture", "", "host:port of a redis-server to capture COMMAND INFO from into -json first")
	jsonPath := flag.String("json", "testdata/commands.json", "command table JSON to read (and to write with -capture)")
	out := flag.String("o", "commands_gen.go", "Go file to write")
	flag.Parse()
	if err := run(*capture, *jsonPath, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(capture, jsonPath, out string) error {
	if capture != "" {
		f, err := cmdgen.Capture(capture, 10*time.Second)
		if err != nil {
			return err
		}
		data, err := cmdgen.Marshal(f)
		if err != nil {
			return err
		}
		if err := os.WriteFile(jsonPath, data, 0o644); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(jsonPath)
	if err != nil {
		return err
	}
	f, err := cmdgen.Parse(data)
	if err != nil {
		return err
	}
	src, err := cmdgen.Generate(f)
	if err != nil {
		return err
	}
	return os.WriteFile(out, src, 0o644)
}
