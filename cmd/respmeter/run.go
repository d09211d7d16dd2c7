package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Process exit codes.
const (
	// exitOK: the command did what was asked, including a signalled stop.
	exitOK = 0
	// exitFailure: a runtime failure (a port in use, an engine that would
	// not start, a stop that missed its deadline).
	exitFailure = 1
	// exitUsage: bad command line, environment or configuration file.
	exitUsage = 2
)

// exitError carries an exit code out of a cobra RunE. run prints err (when
// non-nil) to stderr, one "respmeter: " line per joined error, then hint.
type exitError struct {
	code int
	err  error  // nil when the failure has already been reported (logged)
	hint string // e.g. "Run 'respmeter proxy --help' for usage."
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageError returns an exitUsage error for cmd with a --help hint.
func usageError(cmd *cobra.Command, err error) error {
	return &exitError{code: exitUsage, err: err, hint: fmt.Sprintf("Run '%s --help' for usage.", cmd.CommandPath())}
}

// configError returns an exitUsage error listing configuration problems.
func configError(err error) error { return &exitError{code: exitUsage, err: err} }

// failure returns an exitFailure error; err nil means already reported.
// An err that already carries an exit code (a configError found while
// starting) keeps it.
func failure(err error) error {
	if ee := (*exitError)(nil); errors.As(err, &ee) {
		return err
	}
	return &exitError{code: exitFailure, err: err}
}

// app is one invocation of the CLI: its output streams and its view of the
// environment. Nothing about it is global, so tests may run several.
type app struct {
	stdout, stderr io.Writer
	// lookupEnv reads one environment variable (os.LookupEnv).
	lookupEnv func(string) (string, bool)
	// environ lists the environment as KEY=value (os.Environ).
	environ func() []string
}

// run executes the command line args (without the program name) and
// returns the process exit code. Output goes to stdout (tables, help,
// version) and stderr (logs, errors).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr, lookupEnv: os.LookupEnv, environ: os.Environ}
	return a.run(ctx, args)
}

// run is the package-level run for a.
func (a *app) run(ctx context.Context, args []string) int {
	root := a.rootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// Errors cobra produces itself (unknown flags and the like).
		ee = &exitError{code: exitUsage, err: err, hint: "Run 'respmeter --help' for usage."}
	}
	if ee.err != nil {
		for _, line := range errorLines(ee.err) {
			fmt.Fprintf(a.stderr, "respmeter: %s\n", line)
		}
	}
	if ee.hint != "" {
		fmt.Fprintln(a.stderr, ee.hint)
	}
	return ee.code
}

// errorLines splits an error's text into lines; errors.Join puts one
// joined error on each.
func errorLines(err error) []string {
	return strings.Split(err.Error(), "\n")
}

// rootCmd builds the command tree. Flags are bound to structs local to each
// command, so building twice gives two independent trees.
func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "respmeter",
		Short: "A RESP-aware measuring proxy for Redis-compatible servers",
		Long: `respmeter sits between Redis clients and a Redis-compatible server, forwards
every command unchanged and measures it: per-command latency percentiles split
into time spent upstream and time spent in the proxy, exposed on /metrics
(Prometheus) and /stats (JSON), and printed as a table on SIGUSR1 and at exit.

Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
			if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
				msg += fmt.Sprintf(" (did you mean %q?)", s[0])
			}
			return usageError(cmd, errors.New(msg))
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(a.stderr)
			_ = cmd.Help()
			return &exitError{code: exitUsage}
		},
	}
	root.CompletionOptions.DisableDefaultCmd = true
	root.SuggestionsMinimumDistance = 2
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(flagError)
	root.AddCommand(a.proxyCmd(), a.demoCmd(), a.demoLoadCmd(), newReportCmd(a.stdout, a.stderr), newCheckCmd(a.stdout, a.stderr),
		newCaptureCmd(a.stdout), newInjectCmd(a.stdout), newHeatCmd(a.stdout), newReplayCmd(a.stdout, a.stderr, a.lookupEnv), a.versionCmd())
	return root
}

// noArgs is cobra.NoArgs reporting a usage error.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError(cmd, fmt.Errorf("unexpected argument %q: %s takes only flags", args[0], cmd.CommandPath()))
	}
	return nil
}

// versionCmd is "respmeter version".
func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version and build information",
		Long: `Print respmeter's version, the Go version it was built with and the
target platform. The version comes from the module build information.`,
		Args: noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(a.stdout, versionString())
			return err
		},
	}
}

// version and commit, when set at link time (go build -ldflags "-X
// main.version=v1.2.3 -X main.commit=<sha>", as the Dockerfile does from
// its VERSION and COMMIT build arguments), take the place of the module
// build information, which a build without the module's version (a
// Docker build context has no .git) leaves at "(devel)". go install
// module@version needs neither.
var version, commit string

// versionString is one line: "respmeter v1.2.3 go1.26.8 linux/amd64",
// plus "commit abc123[+dirty]" when the build recorded VCS information or
// main.commit was stamped; main.version and main.commit, when set, win.
func versionString() string {
	v, rev, dirty := "(devel)", "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if version != "" {
		v = version
	}
	if commit != "" {
		rev, dirty = commit, false
	}
	out := fmt.Sprintf("respmeter %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if dirty {
			rev += "+dirty"
		}
		out += " commit " + rev
	}
	return out
}
