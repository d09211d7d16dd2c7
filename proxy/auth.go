package proxy

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/panjf2000/gnet/v2"

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
// at Start, every Config.AuthCheck, and as soon as the engine has answered
// a command that may change it (CONFIG SET, ACL SETUSER, ...) or a shared
// connection gets -NOAUTH.
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

// errAuthUnreachable: the engine did not answer the check's command (a
// frozen or dead engine), so a new connection would not answer either.
var errAuthUnreachable = errors.New("engine not answering the auth check")

// noauthReply starts the engine's answer to a command on a connection that
// must authenticate first (-NOAUTH Authentication required.).
var noauthReply = []byte("-NOAUTH")

// refusesAnonymous reports whether the engine at addr refuses a new
// connection without credentials: by its default user (defaultUserRefuses,
// one round trip on a kept connection) where it can tell, else by a PING
// on a new connection, answered -NOAUTH.
func (p *Proxy) refusesAnonymous(ctx context.Context, addr string) bool {
	if time.Now().Before(p.authSilent[addr]) {
		return false // it did not answer a check a moment ago (authSilentFor)
	}
	refused, ok, err := p.defaultUserRefuses(ctx, addr)
	if ok {
		return refused
	}
	if errors.Is(err, errAuthUnreachable) {
		// No answer within the timeout: waiting once more for a PING on a
		// new connection, or at each of the next checks, would hold the
		// new clients waiting for them (a frozen master until its
		// failover) for nothing.
		if p.authSilent == nil {
			p.authSilent = make(map[string]time.Time)
		}
		p.authSilent[addr] = time.Now().Add(authSilentFor)
		return false
	}
	c, err := respconn.Dial(ctx, addr, respconn.Options{Timeout: p.cfg.DialTimeout, TLS: p.cfg.UpstreamTLS})
	if err != nil {
		return false
	}
	defer c.Close()
	v, err := c.Do(p.cfg.DialTimeout, "PING")
	return err == nil && v.IsError() && strings.HasPrefix(v.Str, string(noauthReply[1:]))
}

// A new client is served on shared connections only once a check that
// started after it connected has passed (client.authAfter, pauseAuth): its
// first command waits for it, so a password set on the engine behind
// respmeter's back is met by every client that connects after the change
// (a fresh engine connection would refuse it) with no window. Checks are
// coalesced: one runs at a time, and every client waiting when it starts
// is served by it, so a burst of new clients costs one check and clients
// already served cost none.

// defaultUserRefuses asks the engine at addr, on a connection kept for
// the checks (opened without credentials: as the default user), for its
// default user (ACL GETUSER default). Redis logs a new connection in as
// the default user when that user is on and has nopass, and asks it for a
// password otherwise (CONFIG SET requirepass removes nopass); so refused
// is "off" or no "nopass" among its flags. -NOAUTH (the kept connection
// was lost and re-dialled after a password was set) is a refusal too. ok
// is false when the engine cannot tell this way (no connection, an engine
// without ACL, a default user not allowed ACL GETUSER: -NOPERM): the
// caller dials a new connection instead. Only the auth-check goroutine
// calls it (Start's first check before it).
func (p *Proxy) defaultUserRefuses(ctx context.Context, addr string) (refused, ok bool, err error) {
	c := p.authConns[addr]
	if c == nil {
		if c, err = respconn.Dial(ctx, addr, respconn.Options{Timeout: min(p.cfg.DialTimeout, 4*authAnswerTimeout), Name: authCheckName, TLS: p.cfg.UpstreamTLS}); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return false, false, errAuthUnreachable
			}
			return false, false, err
		}
		if p.authConns == nil {
			p.authConns = make(map[string]*respconn.Conn)
		}
		p.authConns[addr] = c
	}
	v, err := c.Do(min(p.cfg.DialTimeout, authAnswerTimeout), "ACL", "GETUSER", "default")
	if err == nil && v.IsError() && strings.HasPrefix(v.Str, string(noauthReply[1:])) {
		return true, true, nil
	}
	if err != nil || v.IsError() || !v.IsArray() {
		c.Close()
		delete(p.authConns, addr) // dialled again at the next check
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return false, false, errAuthUnreachable
		}
		return false, false, err
	}
	for i := 0; i+1 < len(v.Elems); i += 2 {
		if v.Elems[i].Str != "flags" {
			continue
		}
		on, nopass := false, false
		for _, f := range v.Elems[i+1].Elems {
			on = on || f.Str == "on"
			nopass = nopass || f.Str == "nopass"
		}
		return !on || !nopass, true, nil
	}
	return false, false, nil
}

// authAnswerTimeout bounds the wait for an engine's answer to the auth
// check's ACL GETUSER (one round trip, well under a millisecond on a live
// engine), and four times it the dial of the connection kept for it: new
// shared clients wait for the check, and an engine that does not answer
// (frozen until its failover, say) counts as not refusing, as one that
// cannot be reached does, rather than holding them.
const authAnswerTimeout = 250 * time.Millisecond

// authSilentFor is how long an engine that did not answer an auth check
// is left out of the next ones (counted as not refusing).
const authSilentFor = 5 * time.Second

// authCheckName is the CLIENT SETNAME of the connection kept for the auth
// checks, so that an operator can tell it in CLIENT LIST.
const authCheckName = "respmeter-auth-check"

// closeAuthConns closes the connections defaultUserRefuses kept.
func (p *Proxy) closeAuthConns() {
	for addr, c := range p.authConns {
		c.Close()
		delete(p.authConns, addr)
	}
}

// watchAuth keeps p.authRequired up to date until ctx ends: every interval
// and at once when asked (authNow: a new client waits, or
// requestAuthCheck).
func (p *Proxy) watchAuth(ctx context.Context, every time.Duration) {
	defer close(p.authDone)
	defer p.closeAuthConns()
	periodicNow(ctx, every, nil, p.authNow, func() {
		seq := p.authStarted.Add(1)
		p.setAuthRequired(p.authCheck(ctx))
		p.authPassed.Store(seq)
		p.wakeAuthWaiters()
	})
}

// authChecked reports whether an auth check numbered after (or at) seq
// has completed.
func (p *Proxy) authChecked(seq uint64) bool { return p.authPassed.Load() >= seq }

// wakeAuthWaiters has every loop with clients waiting for a check resume
// those it served (runs on the check's goroutine).
func (p *Proxy) wakeAuthWaiters() {
	if p.authWaiters.Load() == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.loops {
		if l.el != nil {
			_ = l.el.Execute(context.Background(), gnet.RunnableFunc(l.wakeAuth))
		}
	}
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

// requestAuthCheck asks watchAuth for a check at once (never blocks): the
// engine has answered a command that may have changed its authentication
// (eAuthChange), so the check sees the change.
func (p *Proxy) requestAuthCheck() {
	if p.authNow == nil {
		return
	}
	select {
	case p.authNow <- struct{}{}:
	default: // one is asked for already, and starts after this
	}
}

// mayChangeAuth reports whether a request may change what the engine asks
// of a new connection: CONFIG SET (requirepass) and ACL but its read-only
// subcommands (SETUSER, DELUSER, LOAD, and any the list does not know).
// CONFIG GET, ACL GETUSER and the like, which some clients and
// redis-benchmark send at connect, change nothing.
func mayChangeAuth(id command.ID, args [][]byte) bool {
	switch {
	case id == command.Config:
		return len(args) > 1 && eqFold(args[1], "set")
	case id == command.Acl:
		if len(args) < 2 {
			return false
		}
		for _, ro := range aclReadOnly {
			if eqFold(args[1], ro) {
				return false
			}
		}
		return true
	}
	return false
}

// aclReadOnly are the ACL subcommands that change no user (Redis's ACL
// command reference).
var aclReadOnly = [...]string{"cat", "dryrun", "genpass", "getuser", "help", "list", "log", "users", "whoami"}
