package metrics_test

import (
	"bytes"
	"testing"

	"github.com/respmeter/respmeter/metrics"
)

func TestWriteTableGolden(t *testing.T) {
	tests := []struct {
		name string
		set  *metrics.Set
	}{
		{"table.txt", populated()},
		{"table_empty.txt", metrics.NewSet(1, testNames)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := tc.set.WriteTable(&buf); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, buf.Bytes())
		})
	}
}
