package check

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/respmeter/respmeter/internal/resp"
)

// Clean-up shape.
const (
	// cleanupConns bounds the connections the clean-up opens.
	cleanupConns = 8
	// cleanupKeys is the number of keys per DEL.
	cleanupKeys = 128
	// cleanupDepth is the number of DELs per pipelined batch.
	cleanupDepth = 16
)

// cleanup deletes every key the connected workers may have created, with
// DELs of up to cleanupKeys keys pipelined cleanupDepth at a time on up to
// cleanupConns fresh connections, within o.Timeout overall. Each DEL must
// be answered by an integer.
func cleanup(ctx context.Context, o *Options, workers []*worker) error {
	var keys [][]byte
	for _, w := range workers {
		if w.connected {
			keys = append(keys, w.keys()...)
		}
	}
	var dels [][][]byte
	for len(keys) > 0 {
		n := min(cleanupKeys, len(keys))
		dels = append(dels, keys[:n])
		keys = keys[n:]
	}
	if len(dels) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	conns := min(cleanupConns, len(dels))
	errs := make([]error, conns)
	var wg sync.WaitGroup
	for i := range conns {
		var mine [][][]byte
		for j := i; j < len(dels); j += conns {
			mine = append(mine, dels[j])
		}
		wg.Go(func() { errs[i] = deleteKeys(ctx, o, mine) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// deleteKeys sends the DELs dels on a new connection.
func deleteKeys(ctx context.Context, o *Options, dels [][][]byte) error {
	c, err := dial(ctx, o)
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		if err := c.SetDeadline(dl); err != nil {
			return err
		}
	}
	br := bufio.NewReader(c)
	var out, raw []byte
	for len(dels) > 0 {
		batch := dels[:min(cleanupDepth, len(dels))]
		dels = dels[len(batch):]
		out = out[:0]
		for _, ks := range batch {
			out = appendArrayHeader(out, 1+len(ks))
			out = appendBulkString(out, "DEL")
			for _, k := range ks {
				out = appendBulk(out, k)
			}
		}
		if _, err := c.Write(out); err != nil {
			return wrapCtx(ctx, err)
		}
		for range batch {
			if raw, err = readReply(br, raw[:0]); err != nil {
				return wrapCtx(ctx, err)
			}
			if raw[0] != resp.TypeInteger {
				return fmt.Errorf("DEL: expected an integer reply, got %s", show(raw))
			}
		}
	}
	return nil
}

// wrapCtx adds ctx's error to err, an I/O error that ctx may have caused.
func wrapCtx(ctx context.Context, err error) error {
	var ne net.Error
	if ctx.Err() != nil && errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}
