package command

import (
	"bytes"
	"os"
	"testing"

	"github.com/respmeter/respmeter/routing/command/internal/cmdgen"
)

// TestGeneratedUpToDate regenerates the table from testdata/commands.json in
// process (the code gen.go runs) and wants commands_gen.go byte for byte.
func TestGeneratedUpToDate(t *testing.T) {
	want, err := os.ReadFile("commands_gen.go")
	if err != nil {
		t.Fatal(err)
	}
	got, err := cmdgen.Generate(loadJSON(t))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("commands_gen.go is stale or edited by hand: run go generate ./routing/command")
	}
	if !bytes.HasPrefix(got, []byte(cmdgen.Header+"\n")) {
		t.Errorf("generated file does not start with %q", cmdgen.Header)
	}
	// Generation depends only on the JSON: a second run gives the same bytes.
	again, err := cmdgen.Generate(loadJSON(t))
	if err != nil || !bytes.Equal(again, got) {
		t.Errorf("second Generate differs (err %v)", err)
	}
}

// TestJSONCanonical wants testdata/commands.json exactly as the capture
// writes it, so hand edits show up.
func TestJSONCanonical(t *testing.T) {
	data, err := os.ReadFile("testdata/commands.json")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmdgen.Marshal(loadJSON(t))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, data) {
		t.Error("testdata/commands.json is not in canonical form; recapture with go run gen.go -capture host:port")
	}
}

func TestConstName(t *testing.T) {
	for in, want := range map[string]string{
		"get": "Get", "georadius_ro": "GeoradiusRo", "restore-asking": "RestoreAsking",
		"info": "InfoCmd", "client": "Client", "bitfield_ro": "BitfieldRo",
	} {
		if got := cmdgen.ConstName(in); got != want {
			t.Errorf("ConstName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGenerateRejects(t *testing.T) {
	one := func(i int) *int { return &i }
	base := func() *cmdgen.File {
		return &cmdgen.File{Server: "x", Version: "x", Commands: []*cmdgen.Command{{
			Name: "get", Arity: 2, Flags: []string{"readonly"},
			KeySpecs: []*cmdgen.KeySpec{{
				Flags:       []string{"RO"},
				BeginSearch: cmdgen.BeginSearch{Type: "index", Spec: cmdgen.BeginSearchSpec{Index: one(1)}},
				FindKeys:    cmdgen.FindKeys{Type: "range", Spec: cmdgen.FindKeysSpec{LastKey: one(0), KeyStep: one(1), Limit: one(0)}},
			}},
		}}}
	}
	if _, err := cmdgen.Generate(base()); err != nil {
		t.Fatalf("base: %v", err)
	}
	for name, mutate := range map[string]func(f *cmdgen.File){
		"unknown flag":      func(f *cmdgen.File) { f.Commands[0].Flags = []string{"frobnicate"} },
		"unknown key flag":  func(f *cmdgen.File) { f.Commands[0].KeySpecs[0].Flags = []string{"XX"} },
		"bad begin search":  func(f *cmdgen.File) { f.Commands[0].KeySpecs[0].BeginSearch.Type = "regex" },
		"range w/o lastkey": func(f *cmdgen.File) { f.Commands[0].KeySpecs[0].FindKeys.Spec.LastKey = nil },
		"duplicate":         func(f *cmdgen.File) { f.Commands = append(f.Commands, f.Commands[0]) },
		"named other":       func(f *cmdgen.File) { f.Commands[0].Name = "other" },
		"bad name":          func(f *cmdgen.File) { f.Commands[0].Name = "GET" },
		"const collision": func(f *cmdgen.File) {
			f.Commands = append(f.Commands, &cmdgen.Command{Name: "ge-t"}, &cmdgen.Command{Name: "ge_t"})
		},
		"bad subcommand": func(f *cmdgen.File) {
			f.Commands[0].Subcommands = []*cmdgen.Command{{Name: "set|x"}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := base()
			mutate(f)
			if _, err := cmdgen.Generate(f); err == nil {
				t.Error("Generate succeeded, want error")
			}
		})
	}
}
