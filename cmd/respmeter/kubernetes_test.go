package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// k8sContainers returns the containers and init containers found anywhere
// in a YAML document.
func k8sContainers(n any, out *[]map[string]any) {
	switch v := n.(type) {
	case map[string]any:
		for k, c := range v {
			if list, ok := c.([]any); ok && (k == "containers" || k == "initContainers") {
				for _, e := range list {
					if m, ok := e.(map[string]any); ok {
						*out = append(*out, m)
					}
				}
				continue
			}
			k8sContainers(c, out)
		}
	case []any:
		for _, e := range v {
			k8sContainers(e, out)
		}
	}
}

// TestKubernetesArgs: the respmeter command lines in configs/kubernetes,
// with their $(VAR)s given values, are ones respmeter accepts: known
// commands and flags, and for replay valid --partition and --start-at
// (it then fails only on the absent capture file: exit 1, not 2).
func TestKubernetesArgs(t *testing.T) {
	files, _ := filepath.Glob("../../configs/kubernetes/*/*.yaml")
	if len(files) == 0 {
		t.Fatal("no manifests in configs/kubernetes")
	}
	vars := map[string]string{
		"INDEX": "3", "WORKERS": "4", "START_AT": time.Now().Add(time.Hour).UTC().Format(time.RFC3339),
		"TARGET": "127.0.0.1:1", "SPEED": "1", "CAPTURE": "absent.respcap", "UPSTREAM": "127.0.0.1:1",
	}
	ref := regexp.MustCompile(`\$\(([A-Z_]+)\)`)
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var cs []map[string]any
			k8sContainers(doc, &cs)
			for _, c := range cs {
				img, _ := c["image"].(string)
				raw, _ := c["args"].([]any)
				if !strings.Contains(img, "respmeter") || len(raw) == 0 {
					continue
				}
				var args []string
				for _, a := range raw {
					s := ref.ReplaceAllStringFunc(a.(string), func(m string) string {
						v, ok := vars[ref.FindStringSubmatch(m)[1]]
						if !ok {
							t.Errorf("%s: no test value for %s", f, m)
						}
						return v
					})
					args = append(args, s)
				}
				seen++
				a := &app{stdout: io.Discard, stderr: io.Discard, lookupEnv: func(string) (string, bool) { return "", false }, environ: os.Environ}
				cmd, rest, err := a.rootCmd().Find(args)
				if err == nil {
					err = cmd.ParseFlags(rest)
				}
				if err != nil || cmd.Name() == "respmeter" {
					t.Errorf("%s: respmeter %q: %v", f, args, err)
					continue
				}
				if cmd.Name() != "replay" {
					continue
				}
				var stderr bytes.Buffer
				if code := run(context.Background(), args, io.Discard, &stderr); code != exitFailure || !strings.Contains(stderr.String(), "absent.respcap") {
					t.Errorf("%s: respmeter %q: exit %d, want 1 for the absent capture only\n%s", f, args, code, stderr.String())
				}
			}
		}
	}
	if seen < 3 {
		t.Errorf("%d respmeter containers in the manifests, want the replay, merge and proxy ones", seen)
	}
}
