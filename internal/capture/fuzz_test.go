package capture

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzReader feeds arbitrary files to the reader: it returns records or a
// FormatError, never panics; the seeds are real captures.
func FuzzReader(f *testing.F) {
	dir := f.TempDir()
	for i, fill := range []func(c *Capture){
		func(c *Capture) {
			id, _ := c.NewConn()
			c.Loop(0).Conn(id, 0, cmd("HELLO", "3"))
			c.Loop(0).Batch(id, 1, 1, cat(cmd("SET", "k", "v"), cmd("GET", "k")), false)
			c.Loop(0).Reply(id, 1, 2, []byte("+OK\r\n"), false, 10, 5)
			c.Loop(0).Reply(id, 2, 3, []byte("-ERR x\r\n"), false, 10, 5)
		},
		func(c *Capture) {
			id, _ := c.NewConn()
			c.Loop(0).Batch(id, 1, 1, cat(cmd("GET", "k"), cmd("GET", "k"), cmd("GET", "x")), true)
			var g Replies
			g.Add(1, 2, []byte("$1\r\nv\r\n"), false, 10, 5)
			g.Add(2, 2, []byte("$1\r\nv\r\n"), false, 11, 5)
			g.Add(3, 4, []byte("-WRONGTYPE x\r\n"), false, 12, 6)
			c.Loop(0).Replies(id, &g)
		},
		func(c *Capture) {},
	} {
		path := filepath.Join(dir, string(rune('a'+i)))
		c, err := Start(path, Options{})
		if err != nil {
			f.Fatal(err)
		}
		fill(c)
		if err := c.Stop(); err != nil {
			f.Fatal(err)
		}
		f.Add(mustRead(f, path))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 1<<20 {
			return
		}
		err := readAll(data)
		var fe *FormatError
		if err != nil && !errors.As(err, &fe) {
			// zstd.NewReader itself fails only on bad options.
			t.Fatalf("error %v (%T) is not a FormatError", err, err)
		}
		// Split in two: a file cut anywhere reads as truncated or fine.
		if len(data) > 1 {
			_ = readAll(data[:len(data)/2])
		}
	})
}

func mustRead(f *testing.F, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	return b
}
