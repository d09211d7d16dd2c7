package proxy

import (
	"context"
	"strings"
	"time"

	"github.com/respmeter/respmeter/internal/respconn"
	"github.com/respmeter/respmeter/routing/command"
)

// Shared upstream connections and the engine's authentication.
//
// A shared connection is opened without AUTH, so it is logged in as the
// engine's default user, and stays so: Redis checks a password when a
// connection logs in, not at each command. A client that never sent AUTH
// may ride on it only while a fresh connection without credentials would be
// accepted too. respmeter checks that (authCheck: a PING on a new
// connection to each engine, answered -NOAUTH when a password is required)
// at Start, every Config.AuthCheck, and soon after a command that may change
// it passes through (CONFIG SET, ACL) or a shared connection gets -NOAUTH.
// While the engines require a password, every client uses private
// connections (a client that sends AUTH always does), so the engine itself
// answers -NOAUTH to a client without credentials: stricter than Redis for
// a client that connected before the password was set, which Redis leaves
// logged in on its own connection.

// authCheck reports whether some engine refuses a new connection without
// credentials (-NOAUTH to PING), trying each engine once; an engine that
// cannot be reached counts as not refusing.
func (p *Proxy) authCheck(ctx context.Context) bool {
	for _, addr := range p.router.load().t.Addrs {
		if p.refusesAnonymous(ctx, addr) {
			return true
		}
	}
	return false
}

// noauthReply starts the engine's answer to a command on a connection that
// must authenticate first (-NOAUTH Authentication required.).
var noauthReply = []byte("-NOAUTH")

// refusesAnonymous sends PING on a new connection to addr and reports
// whether the reply is -NOAUTH.
func (p *Proxy) refusesAnonymous(ctx context.Context, addr string) bool {
	c, err := respconn.Dial(ctx, addr, respconn.Options{Timeout: p.cfg.DialTimeout})
	if err != nil {
		return false
	}
	defer c.Close()
	v, err := c.Do(p.cfg.DialTimeout, "PING")
	return err == nil && v.IsError() && strings.HasPrefix(v.Str, string(noauthReply[1:]))
}

// watchAuth keeps p.authRequired up to date until ctx ends: every interval,
// and soon after a nudge (requestAuthCheck).
func (p *Proxy) watchAuth(ctx context.Context, every time.Duration) {
	defer close(p.authDone)
	periodic(ctx, every, p.authNudge, func() { p.setAuthRequired(p.authCheck(ctx)) })
}

// setAuthRequired records the result of an auth check, logging changes.
func (p *Proxy) setAuthRequired(req bool) {
	if p.authRequired.Swap(req) != req {
		if req {
			p.log.Warn("engine requires a password: clients without AUTH leave the shared upstream connections")
		} else {
			p.log.Info("engine accepts connections without a password: shared upstream connections serve clients without AUTH again")
		}
	}
}

// requestAuthCheck asks watchAuth for a check soon (never blocks).
func (p *Proxy) requestAuthCheck() {
	if p.authNudge == nil {
		return
	}
	select {
	case p.authNudge <- struct{}{}:
	default:
	}
}

// mayChangeAuth reports whether a request may change what the engine asks
// of a new connection: CONFIG SET (requirepass), ACL (SETUSER, DELUSER,
// LOAD, ...).
func mayChangeAuth(id command.ID) bool { return id == command.Config || id == command.Acl }
