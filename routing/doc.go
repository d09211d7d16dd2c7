// Package routing decides where a client command goes in a Redis Cluster: it
// finds the command's keys (Keys, FirstKey) from the key specifications of
// the routing/command table, and maps a key to its hash slot (Slot). A
// Resolver does the same and also knows the commands that only the engine
// knows, from the key specs of its COMMAND INFO (command.FetchInfo).
//
// Everything here is pure: functions depend only on their arguments and the
// immutable command table, retain nothing and are safe for concurrent use.
// Returned keys alias the caller's argument slices, so they are valid only as
// long as those are (on the hot path: until the read buffer is discarded).
package routing
