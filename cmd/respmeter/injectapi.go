package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/respmeter/respmeter/proxy"
)

// maxInjectBody bounds a rule file sent to POST /inject.
const maxInjectBody = 1 << 20

// injectList is the answer of /inject: the rules in force, in order.
type injectList struct {
	Rules []proxy.InjectCount `json:"rules"`
}

// injectHandler serves the fault injection rules of p at run time
// (docs/injection.md):
//
//	GET    /inject        the rules in force, what each touched, its window
//	                      and whether it is active now (JSON)
//	POST   /inject        add the rules of the body, a rule file (YAML or JSON)
//	DELETE /inject        remove every rule
//	DELETE /inject/NAME   remove rule NAME (404 when none)
//
// A bad body gets 400 with the file's error ("body:3: rules[1]: ..."), a name in
// force already 409; either way nothing changes. The stack wraps this
// handler in metrics.MutationGuard: POST and DELETE need the token.
func injectHandler(p *proxy.Proxy) http.Handler {
	mux := http.NewServeMux()
	list := func(w http.ResponseWriter) {
		l := injectList{Rules: []proxy.InjectCount{}}
		if in := p.Injection(); in != nil {
			l.Rules = in.Counts()
		}
		writeJSON(w, http.StatusOK, l)
	}
	mux.HandleFunc("GET /inject", func(w http.ResponseWriter, _ *http.Request) { list(w) })
	mux.HandleFunc("POST /inject", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxInjectBody))
		if err != nil {
			writeJSONError(w, http.StatusBadRequest, err)
			return
		}
		in, err := proxy.ParseInjection("body", b)
		if err != nil {
			writeJSONError(w, http.StatusBadRequest, err)
			return
		}
		if err := p.AddInjection(in); err != nil {
			writeJSONError(w, http.StatusConflict, err)
			return
		}
		list(w)
	})
	mux.HandleFunc("DELETE /inject", func(w http.ResponseWriter, _ *http.Request) {
		p.RemoveInjection("")
		list(w)
	})
	mux.HandleFunc("DELETE /inject/{name}", func(w http.ResponseWriter, r *http.Request) {
		if !p.RemoveInjection(r.PathValue("name")) {
			writeJSONError(w, http.StatusNotFound, fmt.Errorf("no rule %q in force", r.PathValue("name")))
			return
		}
		list(w)
	})
	return mux
}

// writeJSON answers v as JSON with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// writeJSONError answers {"error": err} with status code.
func writeJSONError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// windowText shows a rule's window for inject list: "at 10s for 30s",
// "at 10s" (to the end), "for 30s" (from when applied), "-" (none).
func windowText(w *proxy.InjectWindow) string {
	if w == nil {
		return "-"
	}
	var parts []string
	if w.At > 0 {
		parts = append(parts, "at "+time.Duration(w.At*float64(time.Second)).String())
	}
	if w.For > 0 {
		parts = append(parts, "for "+time.Duration(w.For*float64(time.Second)).String())
	}
	return strings.Join(parts, " ")
}

// newInjectCmd builds "respmeter inject": the admin API's /inject from the
// command line.
func newInjectCmd(stdout io.Writer) *cobra.Command {
	var admin, tokenFile string
	cmd := &cobra.Command{
		Use:   "inject",
		Short: "List, add and remove a running respmeter's fault injection rules (its admin /inject)",
		Long: `List, add and remove the fault injection rules of a running respmeter proxy
through its admin API (/inject; docs/injection.md). Adding and removing need
the admin token when the proxy has one (--admin-token-file).`,
		Args: noArgs,
	}
	cmd.PersistentFlags().StringVar(&admin, "admin", "127.0.0.1:9121", "`host:port` of the proxy's admin HTTP")
	cmd.PersistentFlags().StringVar(&tokenFile, "admin-token-file", "", "`file` with the admin bearer token (its first line)")
	call := func(method, path string, body []byte) error {
		req, err := http.NewRequest(method, "http://"+admin+path, bytes.NewReader(body))
		if err != nil {
			return usageError(cmd, err)
		}
		if tokenFile != "" {
			b, err := os.ReadFile(tokenFile)
			if err != nil {
				return usageError(cmd, err)
			}
			tok, _, _ := strings.Cut(string(b), "\n")
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(tok))
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return failure(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxInjectBody))
		if err != nil {
			return failure(err)
		}
		if resp.StatusCode != http.StatusOK {
			var e struct{ Error string }
			if json.Unmarshal(b, &e) != nil || e.Error == "" {
				e.Error = strings.TrimSpace(string(b))
			}
			return failure(fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, e.Error))
		}
		var l injectList
		if err := json.Unmarshal(b, &l); err != nil {
			return failure(fmt.Errorf("%s %s: %w", method, path, err))
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "rule\teffect\ttouched\tactive\twindow")
		for _, r := range l.Rules {
			active := "no"
			if r.Active {
				active = "yes"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.Rule, r.Effect, r.Count, active, windowText(r.Window))
		}
		return failure0(tw.Flush())
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "The rules in force: the requests each touched, whether it is active, its window",
		Args:  noArgs,
		RunE:  func(*cobra.Command, []string) error { return call(http.MethodGet, "/inject", nil) },
	}, &cobra.Command{
		Use:   "add FILE",
		Short: "Add the rules of a rule file (- for stdin) after those in force",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			var b []byte
			var err error
			if args[0] == "-" {
				b, err = io.ReadAll(os.Stdin)
			} else {
				b, err = os.ReadFile(args[0])
			}
			if err != nil {
				return usageError(cmd, err)
			}
			return call(http.MethodPost, "/inject", b)
		},
	}, &cobra.Command{
		Use:   "remove [NAME]",
		Short: "Remove rule NAME, or every rule",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 1 {
				return call(http.MethodDelete, "/inject/"+args[0], nil)
			}
			return call(http.MethodDelete, "/inject", nil)
		},
	})
	return cmd
}
