// Package slowlog keeps a bounded ring of slow commands and serves it as JSON,
// like Redis's SLOWLOG but with respmeter's phases (total, upstream, proxy, …)
// instead of a single execution time.
//
// # What is kept
//
// An Entry holds the command's label from respmeter's command table ("get",
// "other", …; never the raw name a client sent), the argument count, the
// client's address and CLIENT SETNAME name, the phase durations, and at most
// one argument value: the first key, taken from the position the command's
// key spec names and cut to MaxKeyBytes bytes. No other argument value is
// ever kept: for SET k v the entry names k, never v.
//
// # Why credentials cannot leak
//
// Redis commands carry credentials only as plain arguments, never as keys:
// AUTH, HELLO … AUTH user pass, MIGRATE … AUTH pass / AUTH2 user pass,
// CONFIG SET requirepass|masterauth, ACL SETUSER >pass / #hash, and SENTINEL
// and CLIENT subcommands. Since only the key-spec key can be kept, none of
// these reaches an Entry, and SafeFirstKey, through which the proxy takes the
// key, adds a second fence that does not trust the key spec: it returns
// nothing for AUTH, HELLO, CONFIG, ACL, CLIENT and SENTINEL (which have no
// keys anyway), for "other" and any name it does not know (no key spec can
// be trusted for them), and for MIGRATE unless the key comes before the first
// AUTH or AUTH2 argument.
//
// # Concurrency
//
// A Log is safe for concurrent use: any number of goroutines (the proxy's
// event loops) may Add or Record while HTTP handlers read. The proxy calls
// Record, which copies a fixed-size Rec into the ring under a mutex and
// allocates nothing: under load every command may cross the threshold (a
// saturated engine queues pipelines for more than 10 ms), so recording a
// slow command must cost no more than timing it. The strings, maps and
// addresses of an Entry are built when the log is read. SafeFirstKey and
// KeyBuf do not lock and do not allocate either.
package slowlog

import (
	"context"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// DefaultCapacity is the number of entries a Log keeps when New is
	// given a capacity <= 0 (the default of --slowlog-len).
	DefaultCapacity = 128

	// DefaultThreshold is the default of --slowlog-threshold: commands whose
	// total time is at least 10ms are logged.
	DefaultThreshold = 10 * time.Millisecond

	// Disabled is what Threshold returns for a disabled Log (New with a
	// negative threshold): no duration reaches it, so a caller testing
	// total < Threshold() never calls Add.
	Disabled = time.Duration(math.MaxInt64)

	// MaxKeyBytes is the number of bytes of the first key an Entry keeps,
	// counted before escaping; longer keys are cut and flagged with
	// Entry.KeyTruncated.
	MaxKeyBytes = 64
)

// Entry is one slow command. It never holds argument values other than the
// first key: only the command label, the first key (as found by the key
// spec, at most MaxKeyBytes bytes), the argument count and the connection's
// identity. See the package doc.
type Entry struct {
	// ID numbers entries in the order they were added, from 0, and keeps
	// increasing across Reset (as SLOWLOG IDs do). Add assigns it.
	ID int64 `json:"id"`
	// Time is when the reply went out; Add sets it to time.Now() if zero.
	Time time.Time `json:"time"`
	// Command is the lower-case label of the command table, e.g. "get" or
	// "other"; never the raw name from the client.
	Command string `json:"command"`
	// FirstKey is the first key, "" if none or if redacted. Given to Add it
	// is the raw key (as returned by SafeFirstKey, or filled by KeyBuf.Fill);
	// Add cuts it to MaxKeyBytes bytes and escapes it. As read from Entries
	// it is escaped as strconv.Quote would, without the surrounding quotes:
	// printable UTF-8 is kept, `\` and `"` are backslashed, and control
	// characters and invalid bytes become \n, \t, \xNN, \u00NN and the like,
	// so strconv.Unquote(`"`+FirstKey+`"`) gives back the kept bytes.
	FirstKey string `json:"first_key"`
	// KeyTruncated reports that FirstKey holds only the first MaxKeyBytes
	// bytes of the key.
	KeyTruncated bool `json:"key_truncated,omitempty"`
	// Args is the argument count, including the command name.
	Args int `json:"args"`
	// Client is the client's address, ip:port.
	Client string `json:"client"`
	// ClientName is the name the client set with CLIENT SETNAME, if any.
	ClientName string `json:"client_name,omitempty"`
	// Phases maps a phase name ("total", "upstream", "proxy", …) to its
	// duration in seconds. Add copies the map; maps read from Entries are
	// the caller's own.
	Phases map[string]float64 `json:"phases_seconds"`
	// Rule names the fault injection rule that touched the command (a
	// delay of the request or of its reply), if any; its injected time is
	// the "injected" phase, left out of "proxy".
	Rule string `json:"rule,omitempty"`
}

// Rec is a slow command as the proxy records it (Log.Record): fixed-size,
// so that recording it allocates nothing. Entries turns it into an Entry
// with the phases total, upstream, proxy (total − upstream), service and
// queue (upstream − service), in seconds.
type Rec struct {
	// Command is the command table's label ("get", "other", …). It must be
	// a string that is never modified (the table's own), since Record keeps
	// it as is.
	Command string
	// Args is the argument count, including the command name.
	Args int
	// Client is the client's address.
	Client netip.AddrPort
	// ClientName is the CLIENT SETNAME name, kept as is: an immutable
	// string, never one aliasing a reused buffer.
	ClientName string
	// Key is the first key, as found by SafeFirstKey.
	Key KeyBuf
	// Total, Upstream and Service are the command's phases (ns): from its
	// arrival to its reply going out, from its send to the engine to its
	// reply arriving, and the engine's share of Upstream (see the proxy's
	// timing model). Service is capped at Upstream.
	Total, Upstream, Service time.Duration
	// Injected is the command's injected time (ns; fault injection), part
	// of Total and of no other phase; Rule the rule's name, an immutable
	// string, or "".
	Injected time.Duration
	Rule     string
}

// item is one slot of the ring: a Rec or, from Add, an Entry.
type item struct {
	rec   Rec
	entry Entry
	isRec bool
	id    int64
	at    int64 // Record's time, Unix ns
}

// Log is a bounded ring of the most recent slow commands. Its methods are
// safe for concurrent use. The zero Log is not usable; call New.
type Log struct {
	threshold time.Duration // Disabled when disabled; immutable

	mu     sync.Mutex
	ring   []item // len == capacity; ring[next-1] is the newest
	next   int    // index the next Add writes
	n      int    // entries held, <= len(ring)
	nextID int64

	engine func(context.Context) []EngineLog               // SetEngine's; nil: none
	show   func(key []byte, truncated bool) (string, bool) // SetKeyShow's; nil: escapeKey
}

// New returns a Log keeping the capacity most recent entries (DefaultCapacity
// if capacity <= 0), meant for commands whose total time is at least
// threshold. A threshold of 0 logs every command, as slowlog-log-slower-than
// 0 does in Redis; a negative threshold disables the Log: Threshold returns
// Disabled and Add does nothing. The caller applies DefaultThreshold itself
// when no threshold was configured.
func New(capacity int, threshold time.Duration) *Log {
	if capacity <= 0 {
		capacity = DefaultCapacity
	}
	if threshold < 0 {
		threshold = Disabled
	}
	return &Log{threshold: threshold, ring: make([]item, capacity)}
}

// Threshold returns the minimum total time of a command worth an Add, or
// Disabled. It does not lock, so the caller can skip all work for a fast
// command cheaply:
//
//	if total < log.Threshold() { return }
func (l *Log) Threshold() time.Duration { return l.threshold }

// Enabled reports whether the Log records anything (New was not given a
// negative threshold).
func (l *Log) Enabled() bool { return l.threshold != Disabled }

// Capacity returns the number of entries the Log keeps.
func (l *Log) Capacity() int { return len(l.ring) }

// Add records e, dropping the oldest entry when the Log is full, in O(1)
// plus the copy of e's strings and Phases. It assigns e.ID, sets e.Time to
// now if zero, cuts e.FirstKey (the raw key) to MaxKeyBytes bytes, setting
// KeyTruncated, and escapes it. Add does not compare e's time with the
// threshold: the caller adds only commands whose total is >= Threshold().
// On a disabled Log, Add does nothing. Add retains none of e's memory, so e
// may be built from strings aliasing buffers that the caller reuses.
func (l *Log) Add(e Entry) {
	if !l.Enabled() {
		return
	}
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	// Copy everything outside the lock: the caller may have built the
	// strings over memory it reuses (unsafe.String over a read buffer).
	e.FirstKey, e.KeyTruncated = showKey(l.show, e.FirstKey, e.KeyTruncated)
	e.Command = strings.Clone(e.Command)
	e.Client = strings.Clone(e.Client)
	e.ClientName = strings.Clone(e.ClientName)
	if e.Phases != nil {
		p := make(map[string]float64, len(e.Phases))
		for k, v := range e.Phases {
			p[strings.Clone(k)] = v
		}
		e.Phases = p
	}

	l.mu.Lock()
	it := l.slot()
	it.entry, it.isRec = e, false
	it.rec = Rec{}
	l.mu.Unlock()
}

// Record adds r as the newest entry, dropping the oldest when the Log is
// full, stamped with the current time. It copies r into the ring and
// allocates nothing (the Entry is built when the log is read), so it may
// run for every command. Like Add, it does not compare r.Total with the
// threshold, and on a disabled Log it does nothing.
func (l *Log) Record(r *Rec) {
	if !l.Enabled() {
		return
	}
	at := time.Now().UnixNano()
	l.mu.Lock()
	it := l.slot()
	it.rec, it.isRec, it.at = *r, true, at
	it.entry = Entry{}
	l.mu.Unlock()
}

// slot claims the ring's next item for a new entry, numbering it.
// l.mu is held.
func (l *Log) slot() *item {
	it := &l.ring[l.next]
	it.id = l.nextID
	l.nextID++
	l.next++
	if l.next == len(l.ring) {
		l.next = 0
	}
	if l.n < len(l.ring) {
		l.n++
	}
	return it
}

// toEntry returns the Entry of an item; from a Rec, it builds the strings,
// the Phases map and the Time. The Phases map of an item from Add is
// shared with the ring.
func (it *item) toEntry(show func([]byte, bool) (string, bool)) Entry {
	if !it.isRec {
		e := it.entry
		e.ID = it.id
		return e
	}
	r := &it.rec
	e := Entry{
		ID:         it.id,
		Time:       time.Unix(0, it.at),
		Command:    r.Command,
		Args:       r.Args,
		ClientName: r.ClientName,
		Rule:       r.Rule,
	}
	if r.Client.IsValid() {
		e.Client = r.Client.String()
	}
	e.FirstKey, e.KeyTruncated = showKey(show, string(r.Key.Bytes()), r.Key.Truncated())
	service := min(r.Service, r.Upstream)
	e.Phases = map[string]float64{
		"total":    r.Total.Seconds(),
		"upstream": r.Upstream.Seconds(),
		"proxy":    max(r.Total-r.Upstream-r.Injected, 0).Seconds(),
		"service":  service.Seconds(),
		"queue":    max(r.Upstream-service, 0).Seconds(),
	}
	if r.Injected > 0 {
		e.Phases["injected"] = r.Injected.Seconds()
	}
	return e
}

// Entries returns the entries held, newest first (as SLOWLOG GET does). The
// slice and the Phases maps are copies the caller may modify.
func (l *Log) Entries() []Entry {
	es, _ := l.entries(-1)
	for i := range es {
		if es[i].Phases != nil {
			p := make(map[string]float64, len(es[i].Phases))
			for k, v := range es[i].Phases {
				p[k] = v
			}
			es[i].Phases = p
		}
	}
	return es
}

// entries returns up to count entries (all if count < 0), newest first, and
// the number held, both read under one lock. Entries from Add share their
// Phases maps with the ring; the maps are never written after Add, so the
// caller may read them but must not modify them.
func (l *Log) entries(count int) ([]Entry, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if count < 0 || count > l.n {
		count = l.n
	}
	out := make([]Entry, count)
	i := l.next
	for k := range out {
		i--
		if i < 0 {
			i = len(l.ring) - 1
		}
		out[k] = l.ring[i].toEntry(l.show)
	}
	return out, l.n
}

// Len returns the number of entries held, at most Capacity.
func (l *Log) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// Reset drops all entries, as SLOWLOG RESET does. IDs keep increasing.
func (l *Log) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	clear(l.ring) // let the strings and maps go
	l.next, l.n = 0, 0
}

// SetKeyShow sets how entries show their first key (and the engine's
// entries, through EngineReader.Show): show gets the raw key cut to
// MaxKeyBytes and whether it was cut (heat.Names.ShowKey: --key-names);
// nil escapes it (escapeKey). Call it before the Log is used.
func (l *Log) SetKeyShow(show func(key []byte, truncated bool) (string, bool)) { l.show = show }

// showKey cuts the raw key to MaxKeyBytes and shows it by show, or by
// escapeKey when show is nil. The result never aliases key.
func showKey(show func([]byte, bool) (string, bool), key string, truncated bool) (string, bool) {
	if show == nil || key == "" {
		return escapeKey(key, truncated)
	}
	if len(key) > MaxKeyBytes {
		key, truncated = key[:MaxKeyBytes], true
	}
	return show([]byte(key), truncated)
}

// escapeKey cuts the raw key to MaxKeyBytes bytes, or-ing truncated with
// whether it did, and escapes it as strconv.Quote does, without the quotes.
// The result never aliases key.
func escapeKey(key string, truncated bool) (string, bool) {
	if len(key) > MaxKeyBytes {
		key, truncated = key[:MaxKeyBytes], true
	}
	if key == "" {
		return "", truncated
	}
	// Worst case 4 bytes out per byte in (\xNN), plus the quotes.
	var buf [2 + 4*MaxKeyBytes]byte
	q := strconv.AppendQuote(buf[:0], key)
	return string(q[1 : len(q)-1]), truncated
}
