package hashslot

import (
	"bytes"
	"context"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/respmeter/respmeter/internal/redistest"
	"github.com/respmeter/respmeter/internal/resp"
	"github.com/respmeter/respmeter/internal/respconn"
)

// refSlot is the Redis Cluster specification's keyHashSlot written plainly:
// a bit-by-bit CRC16-XMODEM and an index scan for the hash tag.
func refSlot(key []byte) uint16 {
	s := -1
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			s = i
			break
		}
	}
	if s >= 0 {
		for e := s + 1; e < len(key); e++ {
			if key[e] == '}' {
				if e > s+1 {
					key = key[s+1 : e]
				}
				break
			}
		}
	}
	var crc uint16
	for _, c := range key {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % NumSlots
}

func TestCRC16CheckValue(t *testing.T) {
	// The CRC-16/XMODEM check value (redis/rueidis internal/cmds/slot_test.go,
	// and the Redis Cluster specification's crc16 reference).
	if got := crc16([]byte("123456789")); got != 0x31C3 {
		t.Fatalf("crc16(123456789) = %#04x, want 0x31c3", got)
	}
	if got := crc16(nil); got != 0 {
		t.Fatalf("crc16(nil) = %#04x, want 0", got)
	}
}

// TestCRC16Lengths compares crc16 with the bit-by-bit reference on random
// keys of every length from 0 to 80 bytes: whole 8-byte blocks, tails of
// each length, and both together.
func TestCRC16Lengths(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 81 {
		for range 50 {
			key := make([]byte, n)
			for i := range key {
				key[i] = byte(rng.Uint32())
			}
			key = bytes.ReplaceAll(key, []byte("{"), []byte("("))
			if got, want := crc16(key)&(NumSlots-1), refSlot(key); got != want {
				t.Fatalf("crc16(%q) & 16383 = %d, reference = %d", key, got, want)
			}
		}
	}
}

// slotCases are the CLUSTER KEYSLOT examples of the Redis docs and the
// placeholder keys of docs/cases.md; the oracle test checks
// them against the engine too.
var slotCases = []struct {
	key  string
	slot uint16
}{
	{"somekey", 11058},
	{"foo{hash_tag}", 2515},
	{"hash_tag", 2515},
	{"key:a", 244},
	{"{key:a}x", 244},
	{"key:b", 12439},
	{"key:c", 8374},
	{"{a}1", 15495},
	{"{b}1", 3300},
	{"{t}k1", 15891},
	{"{t}k2", 15891},
	{"{t}z1", 15891},
	{"{t}s1", 15891},
	{"{t}dst", 15891},
	{"stream:a", 10508},
	{"stream:b", 6511},
	{"session:1", 9436},
	{"list:a", 12003},
	{"list:b", 7808},
	{"list:empty", 11060},
	{"chan:a", 13276},
	{"big:a", 16344},
	{"", 0},
}

// tagCases are keys whose hash-tag handling is easy to get wrong, with the
// bytes that must be hashed (Redis Cluster specification, "Hash tags").
var tagCases = []struct {
	key, hashed string
}{
	{"foo{}{bar}", "foo{}{bar}"}, // empty first tag: hash the whole key
	{"foo{{bar}}zap", "{bar"},    // tag is from the first '{' to the first '}'
	{"foo{bar}{zap}", "bar"},     // only the first tag counts
	{"abc{", "abc{"},             // no '}'
	{"{}", "{}"},
	{"}{", "}{"}, // '}' before '{' does not close it
	{"{", "{"},
	{"}", "}"},
	{"{{}}", "{"},
	{"{a}", "a"},
	{"x{a}y", "a"},
	{"{a\x00b}c", "a\x00b"},
	{"\x00\xff{\xff}", "\xff"},
	{"\xff\xfe\x00", "\xff\xfe\x00"},
	{"{\x00}", "\x00"},
	{"a}b{c}d", "c"},
}

func TestSlot(t *testing.T) {
	for _, tc := range slotCases {
		t.Run(strconv.Quote(tc.key), func(t *testing.T) {
			if got := Slot([]byte(tc.key)); got != tc.slot {
				t.Errorf("Slot(%q) = %d, want %d", tc.key, got, tc.slot)
			}
			if got := refSlot([]byte(tc.key)); got != tc.slot {
				t.Errorf("refSlot(%q) = %d, want %d", tc.key, got, tc.slot)
			}
		})
	}
	if got := Slot(nil); got != 0 {
		t.Errorf("Slot(nil) = %d, want 0", got)
	}
}

func TestSlotHashTags(t *testing.T) {
	for _, tc := range tagCases {
		t.Run(strconv.Quote(tc.key), func(t *testing.T) {
			want := crc16([]byte(tc.hashed)) & (NumSlots - 1)
			if got := Slot([]byte(tc.key)); got != want {
				t.Errorf("Slot(%q) = %d, want %d (the slot of %q)", tc.key, got, want, tc.hashed)
			}
			if got := refSlot([]byte(tc.key)); got != want {
				t.Errorf("refSlot(%q) = %d, want %d", tc.key, got, want)
			}
		})
	}
}

func TestSlotRange(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		k := randKey(rng)
		s := Slot(k)
		if s >= NumSlots {
			t.Fatalf("Slot(%q) = %d, out of range", k, s)
		}
		if r := refSlot(k); s != r {
			t.Fatalf("Slot(%q) = %d, refSlot = %d", k, s, r)
		}
	}
}

func TestSlotAllocs(t *testing.T) {
	key := []byte("{user1000}.following")
	if n := testing.AllocsPerRun(100, func() { Slot(key) }); n != 0 {
		t.Errorf("Slot allocates %v times per call, want 0", n)
	}
}

// randKey returns a random key, biased towards braces, NUL and 0xff.
func randKey(rng *rand.Rand) []byte {
	const alphabet = "{}{}ab:\x00\xff"
	k := make([]byte, rng.IntN(24))
	for i := range k {
		if rng.IntN(2) == 0 {
			k[i] = alphabet[rng.IntN(len(alphabet))]
		} else {
			k[i] = byte(rng.IntN(256))
		}
	}
	return k
}

// TestSlotOracle compares Slot with CLUSTER KEYSLOT of a cluster-enabled
// redis-server for the fixed cases and a few thousand seeded random keys.
func TestSlotOracle(t *testing.T) {
	srv := redistest.Start(t, "--cluster-enabled", "yes")
	rc, err := respconn.Dial(context.Background(), srv.Addr(), respconn.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var keys [][]byte
	for _, tc := range slotCases {
		keys = append(keys, []byte(tc.key))
	}
	for _, tc := range tagCases {
		keys = append(keys, []byte(tc.key))
	}
	rng := rand.New(rand.NewPCG(7, 16384))
	for range 4000 {
		keys = append(keys, randKey(rng))
	}
	keys = append(keys, bytes.Repeat([]byte("x{y}"), 300))
	cmds := make([][]string, len(keys))
	for i, k := range keys {
		cmds[i] = []string{"CLUSTER", "KEYSLOT", string(k)}
	}
	replies, err := rc.Pipeline(30*time.Second, cmds...)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range replies {
		want := int(r.Int)
		if r.Type != resp.TypeInteger {
			t.Fatalf("CLUSTER KEYSLOT %q = %v, want an integer", keys[i], r)
		}
		if got := Slot(keys[i]); int(got) != want {
			t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT = %d", keys[i], got, want)
		}
	}
}

func FuzzSlot(f *testing.F) {
	for _, tc := range slotCases {
		f.Add([]byte(tc.key))
	}
	for _, tc := range tagCases {
		f.Add([]byte(tc.key))
	}
	f.Fuzz(func(t *testing.T, key []byte) {
		if len(key) > 4096 {
			return
		}
		got := Slot(key)
		if want := refSlot(key); got != want {
			t.Fatalf("Slot(%q) = %d, reference = %d", key, got, want)
		}
	})
}

func BenchmarkSlot(b *testing.B) {
	for _, bc := range []struct {
		name string
		key  []byte
	}{
		{"short", []byte("key:a")},
		{"tagged", []byte("{user1000}.following")},
		{"1KiB", bytes.Repeat([]byte("k"), 1024)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.key)))
			b.ResetTimer()
			var s uint16
			for b.Loop() {
				s += Slot(bc.key)
			}
			_ = s
		})
	}
}
