package routing

import "github.com/respmeter/respmeter/internal/hashslot"

// NumSlots is the number of hash slots of a Redis Cluster (Redis Cluster
// specification, "Key distribution model"). Slots are 0 to NumSlots-1.
const NumSlots = hashslot.NumSlots

// Slot returns the hash slot of key, hash tags included (hashslot.Slot
// says how); it does not allocate or retain key.
func Slot(key []byte) uint16 { return hashslot.Slot(key) }
