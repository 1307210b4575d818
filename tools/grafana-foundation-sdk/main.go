// dashboard-strict decodes Grafana dashboards strictly into grafana-foundation-sdk's Go types: a field the types
// do not have, or a value of the wrong type, anywhere in a dashboard, its variables, its panels' options, field
// config and queries, is refused. fleetops builds its dashboards with the SDK's Python builders; this is the
// second reader they meet, no Grafana server being at hand (tests/render/test_monitoring.py).
//
//	dashboard-strict FILE...
//
// One line per problem, "FILE: PATH: WHAT", on standard output; exit 1 if any, 2 when a file cannot be read.
package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

func main() {
	plugins.RegisterDefaultPlugins() // the panels' options and the data sources' queries, decoded by their own types
	refused := false
	for _, path := range os.Args[1:] {
		raw, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dashboard-strict: %v\n", err)
			os.Exit(2)
		}
		for _, problem := range problems(raw) {
			refused = true
			fmt.Printf("%s: %s\n", path, problem)
		}
	}
	if refused {
		os.Exit(1)
	}
}

// problems: what the strict decoding refused, one line each. The SDK returns its (possibly empty) list of
// errors as a non-nil error even when there is none.
func problems(raw []byte) []string {
	var board dashboard.Dashboard
	err := board.UnmarshalJSONStrict(raw)
	var each cog.BuildErrors
	if errors.As(err, &each) {
		out := make([]string, 0, len(each))
		for _, e := range each {
			out = append(out, strings.ReplaceAll(e.Error(), "\n", " "))
		}
		return out
	}
	if err != nil {
		return []string{strings.ReplaceAll(err.Error(), "\n", " ")}
	}
	return nil
}
