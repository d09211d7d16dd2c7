package capture

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/respmeter/respmeter/internal/redistest"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
)

func cmd(args ...string) []byte {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	return respconn.AppendCommand(nil, b...)
}

func cat(frames ...[]byte) []byte { return bytes.Join(frames, nil) }

// keysAt returns the KeyedBatch key entries of the requests of reqs
// (whole multibulk frames) taking argument 1 of each for its key (enough
// for GET/SET/HSET here), as the proxy gives them from its routing.Call.
func keysAt(t testing.TB, reqs []byte) []byte {
	t.Helper()
	var sc resp.RequestScanner
	var out []byte
	for len(reqs) > 0 {
		n, kind, err := sc.Scan(reqs)
		if err != nil || n == 0 {
			t.Fatalf("keysAt: %q: %v", reqs, err)
		}
		sc.Reset()
		args := resp.Args(reqs[:n], kind, nil)
		reqs = reqs[n:]
		var keys [][]byte
		if len(args) > 1 {
			keys = args[1:2]
		}
		out = AppendKeyPos(out, args, keys)
	}
	return out
}

// writeCapture runs a capture that records what fill writes and returns
// the file's path.
func writeCapture(t testing.TB, o Options, fill func(c *Capture)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "c.respcap")
	c, err := Start(path, o)
	if err != nil {
		t.Fatal(err)
	}
	fill(c)
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	return path
}

// decompressed returns the record stream of a capture file.
func decompressed(t testing.TB, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decompress(raw)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCaptureRoundTrip(t *testing.T) {
	batch := cat(cmd("SET", "k1", "v1"), cmd("GET", "k1"), []byte("*0\r\n"), []byte("PING\r\n"))
	path := writeCapture(t, Options{Loops: 2, Base: 1000}, func(c *Capture) {
		id, ok := c.NewConn()
		if !ok {
			t.Fatal("sample 1 must capture every connection")
		}
		b := c.Loop(1)
		b.Conn(id, 1500, cmd("SELECT", "2"))
		b.Batch(id, 2000, 1, batch, false)
		b.Reply(id, 1, 2500, []byte("+OK\r\n"), false, 400, 300)
		b.Reply(id, 2, 2600, []byte("-WRONGTYPE Operation against a key\r\n"), false, 500, 350)
		b.Reply(id, 3, 2700, nil, true, 600, 450)
	})
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	w, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Conns) != 1 {
		t.Fatalf("%d connections, want 1", len(w.Conns))
	}
	c := w.Conns[0]
	if string(c.State) != string(cmd("SELECT", "2")) {
		t.Errorf("state %q", c.State)
	}
	if len(c.Batches) != 1 || c.Batches[0].T != 1000 {
		t.Fatalf("batches %+v, want one at t=1000", c.Batches)
	}
	got := c.Batches[0].Cmds
	want := []struct {
		name string
		typ  byte
		pfx  string
	}{{"set", '+', ""}, {"get", '-', "WRONGTYPE"}, {"ping", 0, ""}}
	if len(got) != len(want) {
		t.Fatalf("%d commands, want %d", len(got), len(want))
	}
	for i, wc := range want {
		g := got[i]
		if g.Name != wc.name || g.Seq != uint64(i+1) || g.Reply == nil || g.Reply.Type != wc.typ || g.Reply.ErrPfx != wc.pfx {
			t.Errorf("command %d: %+v reply %+v, want %+v", i, g, g.Reply, wc)
		}
	}
	if s := Summarize([]byte("+OK\r\n")); *got[0].Reply != s || got[0].Total != 400 || got[0].Upstream != 300 {
		t.Errorf("reply 1 %+v (%d, %d), want %+v (400, 300)", *got[0].Reply, got[0].Total, got[0].Upstream, s)
	}
	if got[2].Reply.Flags&ReplyStreamed == 0 {
		t.Error("streamed flag lost")
	}
}

func TestCaptureSecretsRedacted(t *testing.T) {
	secrets := []string{"pw-auth1", "pw-auth2", "pw-hello", "pw-config", "pw-acl", "pw-migrate", "pw-migr2", "pw-state", "pw-inline"}
	batch := cat(
		cmd("AUTH", "pw-auth1"),
		cmd("auth", "alice", "pw-auth2"),
		cmd("HELLO", "3", "AUTH", "bob", "pw-hello", "SETNAME", "app"),
		cmd("CONFIG", "SET", "maxmemory", "1gb", "requirepass", "pw-config"),
		cmd("ACL", "SETUSER", "carol", "on", ">pw-acl", "~*"),
		cmd("MIGRATE", "h", "1", "", "0", "5000", "AUTH", "pw-migrate", "KEYS", "a"),
		cmd("MIGRATE", "h", "1", "", "0", "5000", "AUTH2", "dave", "pw-migr2", "KEYS", "a"),
		[]byte("AUTH pw-inline\r\n"),
		cmd("SET", "key", "plain"),
	)
	path := writeCapture(t, Options{}, func(c *Capture) {
		id, _ := c.NewConn()
		b := c.Loop(0)
		b.Conn(id, 0, cmd("AUTH", "pw-state"))
		b.Batch(id, 1, 1, batch, false)
	})
	raw := decompressed(t, path)
	for _, s := range secrets {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("secret %q in the file", s)
		}
	}
	for _, keep := range []string{"alice", "bob", "carol", "dave", "maxmemory", "1gb", "plain", "app", Redacted} {
		if !bytes.Contains(raw, []byte(keep)) {
			t.Errorf("%q missing: only credentials are redacted by default", keep)
		}
	}
	w, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(w.Conns[0].Batches[0].Cmds); n != 9 {
		t.Errorf("%d commands after redaction, want 9", n)
	}
}

// TestCaptureCleanBatches: batches the event loop marks clean are written
// as they are, the others (a GET after an AUTH in one read) are still
// redacted, and with RedactValues clean is ignored; the file reads back
// with every batch in order.
func TestCaptureCleanBatches(t *testing.T) {
	mixed := cat(cmd("GET", "k1"), cmd("AUTH", "pw-mixed"), cmd("GET", "k2"))
	for _, values := range []bool{false, true} {
		path := writeCapture(t, Options{RedactValues: values}, func(c *Capture) {
			id, _ := c.NewConn()
			b := c.Loop(0)
			b.Batch(id, 1, 1, cmd("SET", "k0", "clean-value"), true)
			b.Reply(id, 1, 2, []byte("+OK\r\n"), false, 1, 1)
			b.Batch(id, 3, 2, mixed, false)
			b.Batch(id, 4, 5, cmd("GET", "k3"), true)
		})
		raw := decompressed(t, path)
		if bytes.Contains(raw, []byte("pw-mixed")) {
			t.Errorf("values=%v: the AUTH of a mixed batch is in the file", values)
		}
		if in := bytes.Contains(raw, []byte("clean-value")); in == values {
			t.Errorf("values=%v: value of a clean batch in the file: %v", values, in)
		}
		w, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, b := range w.Conns[0].Batches {
			for _, c := range b.Cmds {
				got = append(got, fmt.Sprintf("%d %s", c.Seq, c.Name))
			}
		}
		if want := "[1 set 2 get 3 auth 4 get 5 get]"; fmt.Sprint(got) != want {
			t.Errorf("values=%v: commands %v, want %v", values, got, want)
		}
	}
}

func TestCaptureRedactValues(t *testing.T) {
	batch := cat(
		cmd("SET", "user:1", "secretvalue", "EX", "100"),
		cmd("HSET", "user:1", "field-name-x", "value-two"),
		cmd("SELECT", "3"),
		cmd("CLIENT", "SETNAME", "myname"),
	)
	path := writeCapture(t, Options{RedactValues: true}, func(c *Capture) {
		id, _ := c.NewConn()
		c.Loop(0).KeyedBatch(id, 1, 1, batch, keysAt(t, batch))
	})
	raw := decompressed(t, path)
	for _, v := range []string{"secretvalue", "field-name-x", "value-two", "myname", "100"} {
		if bytes.Contains(raw, []byte(v)) {
			t.Errorf("value %q in the file", v)
		}
	}
	for _, keep := range []string{"user:1", "EX", "SETNAME", "xxxxxxxxxxx", "111", "SELECT\r\n$1\r\n3"} {
		if !bytes.Contains(raw, []byte(keep)) {
			t.Errorf("%q missing", keep)
		}
	}
	w, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if w.Flags&FlagValuesRedacted == 0 {
		t.Error("header does not say values are redacted")
	}
}

// TestCaptureKeyedBatchKeys: value redaction keeps exactly the arguments
// KeyedBatch names as keys: many keys (an MSET of 200, whose count takes
// two varint bytes), keys given out of argument order, a key that aliases
// no argument (left out: redacted), and an entry whose argument count is
// not its request's (no key kept for that request, and the next request
// still reads its own entry).
func TestCaptureKeyedBatchKeys(t *testing.T) {
	var mset [][]byte
	mset = append(mset, []byte("MSET"))
	for i := range 200 {
		mset = append(mset, fmt.Appendf(nil, "mk:%03d", i), fmt.Appendf(nil, "mv-%03d", i))
	}
	msetFrame := respconn.AppendCommand(nil, mset...)
	var keys [][]byte
	for i := 1; i < len(mset); i += 2 {
		keys = append(keys, mset[i])
	}
	copyArgs := [][]byte{[]byte("COPY"), []byte("src-key"), []byte("dst-key"), []byte("REPLACE")}
	copyFrame := respconn.AppendCommand(nil, copyArgs...)
	getArgs := [][]byte{[]byte("GET"), []byte("lost-key")}
	getFrame := respconn.AppendCommand(nil, getArgs...)
	setArgs := [][]byte{[]byte("SET"), []byte("kept-key"), []byte("set-value")}
	setFrame := respconn.AppendCommand(nil, setArgs...)

	var info []byte
	info = AppendKeyPos(info, mset, keys)
	info = AppendKeyPos(info, copyArgs, [][]byte{copyArgs[2], copyArgs[1]}) // out of order
	wrong := [][]byte{getArgs[0], getArgs[1], []byte("x")}
	info = AppendKeyPos(info, wrong, wrong[1:2]) // 3 arguments for GET's 2
	info = AppendKeyPos(info, setArgs, [][]byte{setArgs[1], []byte("elsewhere")})
	batch := cat(msetFrame, copyFrame, getFrame, setFrame)
	path := writeCapture(t, Options{RedactValues: true}, func(c *Capture) {
		id, _ := c.NewConn()
		c.Loop(0).KeyedBatch(id, 1, 1, batch, info)
	})
	raw := decompressed(t, path)
	for _, k := range []string{"mk:000", "mk:127", "mk:128", "mk:199", "src-key", "dst-key", "kept-key", "REPLACE"} {
		if !bytes.Contains(raw, []byte(k)) {
			t.Errorf("key %q redacted", k)
		}
	}
	for _, v := range []string{"mv-000", "mv-199", "lost-key", "set-value"} {
		if bytes.Contains(raw, []byte(v)) {
			t.Errorf("value %q in the file", v)
		}
	}
	w, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range w.Conns[0].Batches {
		for _, c := range b.Cmds {
			got = append(got, c.Name)
		}
	}
	if want := "[mset copy get set]"; fmt.Sprint(got) != want {
		t.Errorf("commands %v, want %v", got, want)
	}
}

// TestCaptureDrainsHalfFull: a buffer past half full wakes the writer
// before its tick (an hour here), so bursts above BufferBytes per
// FlushEvery are written, not dropped.
func TestCaptureDrainsHalfFull(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c")
	c, err := Start(path, Options{BufferBytes: 1024, FlushEvery: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	id, _ := c.NewConn()
	req := cmd("GET", "key:0000")
	n := 0
	for ; n*len(req) < 600; n++ {
		c.Loop(0).Batch(id, int64(n), uint64(n+1), req, true)
	}
	_ = redistest.Await(5*time.Second, time.Millisecond, func() error {
		if c.Stats().Records < int64(n) {
			return errors.New("short") // asserted below
		}
		return nil
	})
	if st := c.Stats(); st.Records < int64(n) || st.Dropped != 0 {
		t.Fatalf("%d of %d records written (%d dropped) with the buffer past half full", st.Records, n, st.Dropped)
	}
}

func TestCaptureDropsWhenFull(t *testing.T) {
	var dropped uint64
	path := writeCapture(t, Options{BufferBytes: 256, FlushEvery: time.Hour}, func(c *Capture) {
		id, _ := c.NewConn()
		b := c.Loop(0)
		for i := range 100 {
			// Every tenth record is larger than the buffer: dropped
			// however fast the writer drains (it is woken at half full).
			key := "k"
			if i%10 == 0 {
				key = strings.Repeat("k", 300)
			}
			b.Batch(id, int64(i), uint64(i+1), cmd("GET", key), false)
		}
		dropped = c.Stats().Dropped
	})
	if dropped < 10 {
		t.Fatalf("%d drops counted with a 256-byte buffer and 10 records larger than it", dropped)
	}
	w, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(w.Conns[0].Batches); n+int(dropped) != 100 {
		t.Errorf("%d batches written + %d dropped != 100", n, dropped)
	}
}

func TestCaptureBufAllocs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c")
	c, err := Start(path, Options{FlushEvery: time.Hour, BufferBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	b := c.Loop(0)
	req := cmd("GET", "key")
	reply := []byte("-ERR bad\r\n")
	n := testing.AllocsPerRun(1000, func() {
		b.Batch(1, 5, 1, req, false)
		b.Reply(1, 1, 6, reply, false, 1, 1)
	})
	if n != 0 {
		t.Errorf("%v allocations per Batch+Reply, want 0", n)
	}
}

// TestCaptureReadableWhileRunning reads a file while the capture still
// writes it: every record flushed so far is there.
func TestCaptureReadableWhileRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c")
	c, err := Start(path, Options{FlushEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	id, _ := c.NewConn()
	c.Loop(0).Batch(id, 1, 1, cmd("GET", "k"), false)
	redistest.EventuallyEvery(t, 10*time.Second, 20*time.Millisecond, func() error {
		w, err := Load(path)
		if err == nil && len(w.Conns) != 1 {
			err = fmt.Errorf("%d connections", len(w.Conns))
		}
		if err != nil {
			return fmt.Errorf("record not readable while capturing: %v", err)
		}
		return nil
	})
}

func TestReaderBadInput(t *testing.T) {
	path := writeCapture(t, Options{}, func(c *Capture) {
		id, _ := c.NewConn()
		c.Loop(0).Batch(id, 1, 1, cmd("SET", "k", strings.Repeat("v", 1000)), false)
		c.Loop(0).Reply(id, 1, 2, []byte("+OK\r\n"), false, 1, 1)
	})
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	future := bytes.Clone(good)
	future[8] = Version + 1
	// A valid stream whose record has an unknown kind.
	enc, _ := zstd.NewWriter(nil)
	badKind := append(bytes.Clone(good[:HeaderSize]), enc.EncodeAll([]byte("Z\x01\x00"), nil)...)
	shortBody := append(bytes.Clone(good[:HeaderSize]), enc.EncodeAll([]byte("B\x05\x01"), nil)...)
	badReply := append(bytes.Clone(good[:HeaderSize]), enc.EncodeAll([]byte("R\x03\x01\x01\x01"), nil)...)
	emptyGroup := append(bytes.Clone(good[:HeaderSize]), enc.EncodeAll([]byte("G\x03\x01\x01\x01"), nil)...)
	// conn 1, t 1, seq 1; '+', flags 0, size 5, 1 byte of hash.
	badGroup := append(bytes.Clone(good[:HeaderSize]), enc.EncodeAll([]byte("G\x06\x01\x01\x01+\x00\x05"), nil)...)
	longPfx := append(bytes.Clone(good[:HeaderSize]), enc.EncodeAll(append([]byte("G\x12\x01\x01\x01-\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x01\x01\x21"), 'E'), nil)...)
	// A whole first reply (total 1, upstream 1, no prefix), then a second
	// whose delta does not end.
	badSecond := append(bytes.Clone(good[:HeaderSize]), enc.EncodeAll([]byte("G\x12\x01\x01\x01+\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\x01\x01\x00\x80"), nil)...)
	groupV1 := bytes.Clone(emptyGroup)
	groupV1[8] = 1
	cases := []struct {
		name string
		data []byte
		err  error
		want string
	}{
		{"empty", nil, ErrTruncated, "offset 0: expected a 20-byte header"},
		{"not capture", []byte("*1\r\n$4\r\nPING\r\n"), ErrNotCapture, "offset 0: expected the magic"},
		{"short header", good[:12], ErrTruncated, "offset 12: expected a 20-byte header"},
		{"future version", future, ErrVersion, "offset 8: expected format version 1..3, got 4"},
		{"truncated frame", good[:len(good)-5], ErrTruncated, ""},
		{"corrupt frame", append(bytes.Clone(good[:HeaderSize]), 0x28, 0xb5, 0x2f, 0xfd, 0xff, 0xff, 0xff), ErrCorrupt, "Zstandard"},
		{"unknown kind", badKind, ErrCorrupt, "offset 0: expected a record kind 'C', 'B', 'G', 'I' or 'R', got 'Z'"},
		{"empty group", emptyGroup, ErrCorrupt, "expected at least one reply in a 'G' record of 3 bytes"},
		{"bad group entry", badGroup, ErrCorrupt, "offset 2: expected an 8-byte reply hash in a 'G' record of 6 bytes"},
		{"long error prefix", longPfx, ErrCorrupt, "expected an error prefix of at most 32 bytes after its length in a 'G' record"},
		{"bad second reply", badSecond, ErrCorrupt, "offset 2: expected a request number delta in a 'G' record of 18 bytes"},
		{"group in version 1", groupV1, ErrCorrupt, "expected a record kind 'C', 'B' or 'R' (version 1), got 'G'"},
		{"short body", shortBody, ErrTruncated, "expected a record body of 5 bytes from offset 2"},
		{"bad reply", badReply, ErrCorrupt, "expected a reply type and flags in a 'R' record of 3 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := readAll(tc.data)
			var fe *FormatError
			if !errors.Is(err, tc.err) || !errors.As(err, &fe) {
				t.Fatalf("error %v, want a FormatError wrapping %v", err, tc.err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
	if err := readAll(good); err != nil {
		t.Errorf("good file: %v", err)
	}
}

func readAll(data []byte) error {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return err
	}
	defer r.Close()
	for {
		if _, err := r.Next(); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// TestLoadMergesFiles: two files (two proxies) merge into one timeline,
// each shifted by its header's start relative to the earliest.
func TestLoadMergesFiles(t *testing.T) {
	var paths []string
	var starts []int64
	for i := range 2 {
		p := writeCapture(t, Options{}, func(c *Capture) {
			id, _ := c.NewConn()
			c.Loop(0).Batch(id, 1000, 1, cmd("GET", fmt.Sprint("k", i)), false)
		})
		r, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		rd, err := NewReader(r)
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, rd.Header().Start)
		rd.Close()
		_ = r.Close()
		paths = append(paths, p)
		time.Sleep(20 * time.Millisecond) // the second capture starts later
	}
	w, err := Load(paths[1], paths[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Conns) != 2 || w.Start != starts[0] {
		t.Fatalf("%d connections from start %d, want 2 from the earlier file's %d", len(w.Conns), w.Start, starts[0])
	}
	// Sorted by first batch: the earlier file's connection first.
	if got, want := w.Conns[1].Batches[0].T-w.Conns[0].Batches[0].T, starts[1]-starts[0]; got != want || want < int64(20*time.Millisecond) {
		t.Errorf("second file's batch %d ns after the first's, want %d (>= 20 ms)", got, want)
	}
	if w.Conns[0].File != 1 || w.Conns[1].File != 0 {
		t.Errorf("files %d, %d: want the connection of paths[1] (the earlier file) first", w.Conns[0].File, w.Conns[1].File)
	}
}

// TestCaptureReplyGroups: replies gathered with Replies are one 'G'
// record that reads back as the replies one by one (request numbers, times,
// summaries and phases), fewer bytes than one record per reply.
func TestCaptureReplyGroups(t *testing.T) {
	replies := []struct {
		seq   uint64
		now   int64
		reply []byte
		strm  bool
	}{{1, 2500, []byte("+OK\r\n"), false}, {2, 2600, []byte("-WRONGTYPE Operation against a key\r\n"), false},
		{3, 2600, nil, true}, {5, 9000, []byte(":7\r\n"), false}}
	batch := cat(cmd("SET", "k1", "v1"), cmd("GET", "k1"), cmd("PING"), cmd("SUBSCRIBE", "c"), cmd("INCR", "n"))
	var g Replies
	path := writeCapture(t, Options{Base: 1000}, func(c *Capture) {
		id, _ := c.NewConn()
		b := c.Loop(0)
		b.Batch(id, 2000, 1, batch, false)
		for i, r := range replies {
			g.Add(r.seq, r.now, r.reply, r.strm, int64(100*(i+1)), int64(10*(i+1)))
		}
		b.Replies(id, &g)
		if g.Len() != 0 {
			t.Errorf("%d bytes gathered after Replies, want 0", g.Len())
		}
		b.Replies(id, &g) // empty: no record
	})
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var got []Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if rec.Kind == KindReply {
			got = append(got, rec)
		}
	}
	if len(got) != len(replies) {
		t.Fatalf("%d replies read, want %d", len(got), len(replies))
	}
	for i, want := range replies {
		s := Summarize(want.reply)
		if want.strm {
			s = Summary{Flags: ReplyStreamed}
		}
		g := got[i]
		if g.Conn != 1 || g.Seq != want.seq || g.T != want.now-1000 || g.Reply != s || g.Total != int64(100*(i+1)) || g.Upstream != int64(10*(i+1)) {
			t.Errorf("reply %d: %+v, want seq %d t %d summary %+v", i, g, want.seq, want.now-1000, s)
		}
	}
	grouped := len(decompressed(t, path))
	single := len(decompressed(t, writeCapture(t, Options{Base: 1000}, func(c *Capture) {
		id, _ := c.NewConn()
		c.Loop(0).Batch(id, 2000, 1, batch, false)
		for i, r := range replies {
			c.Loop(0).Reply(id, r.seq, r.now, r.reply, r.strm, int64(100*(i+1)), int64(10*(i+1)))
		}
	})))
	if grouped >= single {
		t.Errorf("one group: %d record bytes, one record per reply: %d; want fewer", grouped, single)
	}
}

// TestReadsVersion1: a version 1 file (one 'R' record per reply, the error
// prefix up to the end of its body) still loads.
func TestReadsVersion1(t *testing.T) {
	var recs []byte
	rec := func(kind byte, body []byte) {
		recs = append(recs, kind)
		recs = binary.AppendUvarint(recs, uint64(len(body)))
		recs = append(recs, body...)
	}
	u := binary.AppendUvarint
	req := cmd("GET", "k")
	rec(KindConn, append(u(u(nil, 7), 5), cmd("SELECT", "1")...))
	rec(KindBatch, append(u(u(u(nil, 7), 10), 1), req...))
	reply := []byte("-ERR no\r\n")
	s := Summarize(reply)
	body := u(u(u(nil, 7), 1), 30)
	body = append(body, s.Type, 0)
	body = u(body, uint64(s.Size))
	body = binary.LittleEndian.AppendUint64(body, s.Hash)
	body = u(u(body, 20), 15)
	rec(KindReply, append(body, "ERR"...))
	enc, _ := zstd.NewWriter(nil)
	file := appendHeader(nil, Header{Version: 1, Start: 1})
	file = append(file, enc.EncodeAll(recs, nil)...)
	path := filepath.Join(t.TempDir(), "v1.respcap")
	if err := os.WriteFile(path, file, 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Conns) != 1 || len(w.Conns[0].Batches) != 1 || len(w.Conns[0].Batches[0].Cmds) != 1 {
		t.Fatalf("workload %+v, want one connection with one GET", w.Conns)
	}
	c := w.Conns[0].Batches[0].Cmds[0]
	if c.Name != "get" || c.Reply == nil || *c.Reply != s || c.Total != 20 || c.Upstream != 15 || string(w.Conns[0].State) != string(cmd("SELECT", "1")) {
		t.Errorf("command %+v reply %+v, want get with %+v, 20, 15", c, c.Reply, s)
	}
}

// BenchmarkEncoder is the writer's compression alone, per decompressed
// byte, on the records of a redis-benchmark -P 16 -d 256 like load
// (pipelines of 16 SETs of one 256-byte value to random keys, then of 16
// GETs of them, each answered by a group record with varying times):
// "now" with encoderOptions, "1MiB-huffman" with the options before
// (a 1 MiB window, Huffman-coded literals). cpu-ns/B is the process's CPU
// time (both run on the benchmark's goroutine); ratio is the size in over
// the size out. Compare the two side by side in one run (BENCHMARKS.md,
// issue 18).
func BenchmarkEncoder(b *testing.B) {
	value := bytes.Repeat([]byte("VXKeHogKgJ=[5V9_"), 16)
	path := writeCapture(b, Options{BufferBytes: 64 << 20}, func(c *Capture) {
		id, _ := c.NewConn()
		buf := c.Loop(0)
		var g Replies
		seq, now := uint64(1), int64(0)
		rnd := uint64(1)
		for range 2000 {
			for _, set := range []bool{true, false} {
				var reqs []byte
				for range 16 {
					rnd = mix(rnd)
					key := fmt.Sprintf("key:%012d", rnd%200000)
					if set {
						reqs = append(reqs, cmd("SET", key, string(value))...)
					} else {
						reqs = append(reqs, cmd("GET", key)...)
					}
				}
				buf.Batch(id, now, seq, reqs, true)
				reply := []byte("+OK\r\n")
				if !set {
					reply = append([]byte("$256\r\n"), append(value, "\r\n"...)...)
				}
				for i := range 16 {
					t := now + 20_000 + int64(mix(rnd+uint64(i))%5000)
					g.Add(seq+uint64(i), t, reply, false, t-now, t-now-3_000)
				}
				buf.Replies(id, &g)
				seq += 16
				now += 150_000
			}
		}
	})
	raw := decompressed(b, path)
	for _, opts := range []struct {
		name string
		opt  []zstd.EOption
	}{
		{"now", encoderOptions()},
		{"1MiB-huffman", []zstd.EOption{zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1 << 20)}},
	} {
		b.Run(opts.name, func(b *testing.B) {
			var out countWriter
			enc, err := zstd.NewWriter(&out, opts.opt...)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for range b.N {
				// As the writer: a frame per drain of (here) 2 MiB.
				for off := 0; off < len(raw); off += 2 << 20 {
					if _, err := enc.Write(raw[off:min(off+2<<20, len(raw))]); err != nil {
						b.Fatal(err)
					}
					if err := enc.Close(); err != nil {
						b.Fatal(err)
					}
					enc.Reset(&out)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N)/float64(len(raw)), "cpu-ns/B")
			b.ReportMetric(float64(b.N)*float64(len(raw))/float64(out.n), "ratio")
		})
	}
}

// countWriter counts the bytes written to it.
type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) {
	w.n += int64(len(p))
	return len(p), nil
}

// cpuTime returns the CPU time (user + system) the process has used so
// far, in ns.
func cpuTime(tb testing.TB) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// TestCaptureInjectedMarks: a fault injection mark ('I', version 3) comes
// back on the command it names, with the rule, the effect and the time; a
// value-redacting capture keeps it; commands without one have none.
func TestCaptureInjectedMarks(t *testing.T) {
	for _, redact := range []bool{false, true} {
		path := writeCapture(t, Options{Loops: 1, Base: 1000, RedactValues: redact}, func(c *Capture) {
			id, _ := c.NewConn()
			b := c.Loop(0)
			b.Batch(id, 2000, 1, cat(cmd("GET", "a"), cmd("GET", "b"), cmd("SET", "c", "v")), true)
			b.Injected(id, 1, 2000, "slow-get", "delay", 2_000_000)
			b.Reply(id, 1, 2_002_500, []byte("$-1\r\n"), false, 2_000_500, 300)
			b.Reply(id, 2, 2_002_600, []byte("$-1\r\n"), false, 2_000_600, 300)
			b.Reply(id, 3, 2_002_700, []byte("-LOADING x\r\n"), false, 100, 0)
			b.Injected(id, 3, 2000, "loading", "error", 0)
		})
		w, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		cmds := w.Conns[0].Batches[0].Cmds
		want := []*Injected{{Rule: "slow-get", Effect: "delay", Ns: 2_000_000}, nil, {Rule: "loading", Effect: "error"}}
		for i, wi := range want {
			got := cmds[i].Injected
			if (got == nil) != (wi == nil) || got != nil && *got != *wi {
				t.Errorf("redact %v: command %d marked %+v, want %+v", redact, i+1, got, wi)
			}
		}
	}
}
