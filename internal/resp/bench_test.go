package resp

import (
	"strconv"
	"strings"
	"testing"
)

var benchSizes = []struct {
	name string
	n    int
}{{"16B", 16}, {"256B", 256}, {"4KiB", 4 << 10}, {"64KiB", 64 << 10}, {"1MiB", 1 << 20}}

func bulkReply(n int) []byte {
	return []byte("$" + strconv.Itoa(n) + "\r\n" + strings.Repeat("v", n) + "\r\n")
}

// smallBulkArray is "*n" followed by n 8-byte bulk strings.
func smallBulkArray(n int) []byte {
	b := []byte("*" + strconv.Itoa(n) + "\r\n")
	for i := 0; i < n; i++ {
		b = append(b, "$8\r\nvalue:00\r\n"...)
	}
	return b
}

// feedReply feeds one complete reply in chunks of at most chunk bytes.
func feedReply(b *testing.B, r *ReplyFramer, in []byte, chunk int) {
	for off := 0; off < len(in); {
		end := min(off+chunk, len(in))
		n, done, err := r.Feed(in[off:end])
		if err != nil {
			b.Fatal(err)
		}
		off += n
		if done != (off == len(in)) {
			b.Fatalf("done=%v at %d of %d", done, off, len(in))
		}
	}
}

// benchFeed frames the whole reply in, in one read per iteration.
func benchFeed(b *testing.B, in []byte) {
	r := NewReplyFramer()
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for b.Loop() {
		feedReply(b, r, in, len(in))
	}
}

func BenchmarkReplyBulk(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			benchFeed(b, bulkReply(sz.n))
		})
	}
}

func BenchmarkReplyArray(b *testing.B) {
	for _, n := range []int{10, 1000, 100000, 1000000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			benchFeed(b, smallBulkArray(n))
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/elem")
		})
	}
}

// BenchmarkReplyArray256 frames an MGET-style reply: an array of 100
// bulk strings of 256 bytes each (issue 6: framing >= 1 GB/s on 256-byte
// values).
func BenchmarkReplyArray256(b *testing.B) {
	in := []byte("*100\r\n")
	for range 100 {
		in = append(in, bulkReply(256)...)
	}
	benchFeed(b, in)
}

// BenchmarkReplySplit feeds a 1,000,000-element array in 4 KiB reads, as it
// comes off a socket: ns/elem must match BenchmarkReplyArray (linear cost).
func BenchmarkReplySplit(b *testing.B) {
	const n = 1000000
	in := smallBulkArray(n)
	r := NewReplyFramer()
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	b.ResetTimer()
	for b.Loop() {
		feedReply(b, r, in, 4<<10)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/elem")
}

func BenchmarkRequestScan(b *testing.B) {
	get := mb("GET", "key:0000")
	set := mb("SET", "key:0000", value256)
	for _, bc := range []struct {
		name  string
		frame string
		depth int
	}{
		{"GET", get, 1}, {"SET-256B", set, 1},
		{"GET-pipeline16", get, 16}, {"SET-256B-pipeline16", set, 16},
		{"inline-GET", "GET key:0000\r\n", 1},
	} {
		b.Run(bc.name, func(b *testing.B) {
			data := []byte(strings.Repeat(bc.frame, bc.depth))
			var s RequestScanner
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for b.Loop() {
				for off := 0; off < len(data); {
					n, _, err := s.Scan(data[off:])
					if err != nil || n == 0 {
						b.Fatal(n, err)
					}
					off += n
				}
			}
		})
	}
}

func BenchmarkArgs(b *testing.B) {
	for _, bc := range []struct {
		name  string
		frame string
		kind  Kind
	}{
		{"GET", mb("GET", "key:0000"), KindMultibulk},
		{"SET-256B", mb("SET", "key:0000", value256), KindMultibulk},
		{"MSET-16", mb(append([]string{"MSET"}, strings.Fields(strings.Repeat("k v ", 16))...)...), KindMultibulk},
		{"inline-SET", "SET key:0000 value\r\n", KindInline},
	} {
		b.Run(bc.name, func(b *testing.B) {
			frame := []byte(bc.frame)
			args := make([][]byte, 0, 64)
			b.ReportAllocs()
			b.SetBytes(int64(len(frame)))
			b.ResetTimer()
			for b.Loop() {
				args = Args(frame, bc.kind, args[:0])
			}
			if len(args) == 0 {
				b.Fatalf("no args in %q", frame)
			}
		})
	}
}
