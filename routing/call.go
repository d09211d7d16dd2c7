package routing

import "github.com/respmeter/respmeter/routing/command"

// Call is one request as the resolver classifies it (Resolver.Classify):
// its command, the entries that apply to it, whether it may block, and its
// keys. The proxy classifies each request once; its shapes, its slow log,
// pinning and blocking timeouts read this value, and nothing looks the
// request up again. The keys are found on first use (Keys, FirstKey,
// KeyPos: most requests on one engine never need them) and kept.
//
// A Call aliases the request's arguments and is reused from request to
// request (Classify resets it, keeping its key buffer): it does not
// allocate once that buffer has room for a request's keys.
type Call struct {
	// ID is the command's metric ID (Resolver.Lookup).
	ID command.ID
	// Info is the effective entry that applies to the request: its
	// subcommand's when the command has subcommands and args[1] names one,
	// else the command's own (Resolver.CallInfo). Its Tips are the command
	// tips (request_policy, response_policy) that route a keyless command.
	Info *command.Info
	// Blocks: the command may hold its connection (Resolver.Blocks).
	Blocks bool

	r      *Resolver
	args   [][]byte
	parent *command.Info // Resolver.Info(ID)
	sub    *command.Info // the subcommand's entry, or nil
	keys   [][]byte
	keyErr error
	walked bool // keys and keyErr are set
}

// Classify fills c for the request args of the command id (as Lookup gave
// it). It does not allocate.
func (r *Resolver) Classify(c *Call, id command.ID, args [][]byte) {
	parent := r.Info(id)
	var sub *command.Info
	if len(args) >= 2 && parent.Subcommands != nil {
		sub = r.subcommand(id, parent, args[1])
	}
	info := parent
	if sub != nil {
		info = sub
	}
	*c = Call{
		ID: id, Info: info, Blocks: id == command.Wait || parent.Flags.Has(command.FlagBlocking),
		r: r, args: args, parent: parent, sub: sub, keys: c.keys[:0],
	}
}

// Forget drops c's references into the request it classified (its
// arguments and keys), keeping its own buffer: a caller that lets a large
// request's bytes go lets them go from c too.
func (c *Call) Forget() {
	clear(c.keys[:cap(c.keys)])
	*c = Call{keys: c.keys[:0]}
}

// Name returns the command's metric label (Resolver.Name).
func (c *Call) Name() string { return c.r.Name(c.ID) }

// Keys returns the request's keys, as Resolver.KeysOf does: aliases of its
// arguments, in c's own buffer (valid until the next Classify).
func (c *Call) Keys() ([][]byte, error) {
	if !c.walked {
		kl := keyList{dst: c.keys[:0], all: true}
		c.keyErr = c.collect(&kl)
		c.keys, c.walked = kl.dst, true
	}
	return c.keys, c.keyErr
}

// FirstKey returns the first of Keys, and true; or nil and false when the
// request has no keys or they cannot be found (Resolver.FirstKeyOf).
func (c *Call) FirstKey() ([]byte, bool) {
	keys, err := c.Keys()
	if err != nil || len(keys) == 0 {
		return nil, false
	}
	return keys[0], true
}

// KeyPos returns the position in the request's arguments of its first key:
// the command's first_key when it has one and no movable keys, else where
// FirstKey found it; -1 for none.
func (c *Call) KeyPos() int {
	if c.parent.FirstKey > 0 && !c.parent.Flags.Has(command.FlagMovablekeys) {
		return c.parent.FirstKey
	}
	if k, ok := c.FirstKey(); ok && len(k) > 0 {
		for i := 1; i < len(c.args); i++ {
			if len(c.args[i]) > 0 && &c.args[i][0] == &k[0] {
				return i
			}
		}
	}
	return -1
}

// collect puts the request's keys into kl from the entries Classify found
// (see collectOf).
func (c *Call) collect(kl *keyList) error {
	if len(c.args) == 0 {
		return nil
	}
	if int(c.ID) >= command.NumIDs() || c.ID == command.Other {
		// An engine-only command: its entry is found by name (collectOf).
		return collectOf(c.r, command.Other, c.args, kl)
	}
	return collectInfo(c.ID, c.parent, c.sub, c.args, kl)
}
