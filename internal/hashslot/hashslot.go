// Package hashslot maps a key to its Redis Cluster hash slot (the Redis
// Cluster specification, "Key distribution model" and "Hash tags"): the
// one mapping that routing, the proxy, heat and respmeter check share.
package hashslot

import "bytes"

// NumSlots is the number of hash slots of a Redis Cluster (Redis Cluster
// specification, "Key distribution model"). Slots are 0 to NumSlots-1.
const NumSlots = 16384

// Slot returns the hash slot of key: CRC16 of the key, modulo NumSlots
// (the mask 16383), as the Redis Cluster specification defines it in "Key
// distribution model" (HASH_SLOT = CRC16(key) mod 16384) and "Hash tags".
//
// If the key contains a '{' and, after the first '{', a '}', and there is at
// least one byte between the two, only the bytes between that first '{' and
// the first '}' after it are hashed ("{user1000}.following" and
// "{user1000}.followers" share a slot). Otherwise the whole key is hashed:
// "foo{}{bar}" hashes whole, "foo{{bar}}" hashes "{bar", "foo{bar}{zap}"
// hashes "bar". The empty key is slot 0. The CRC is CRC16-XMODEM
// (polynomial 0x1021, initial value 0, no reflection, no final XOR), the
// variant whose check value CRC16("123456789") is 0x31C3.
//
// Slot does not allocate or retain key.
func Slot(key []byte) uint16 {
	if i := bytes.IndexByte(key, '{'); i >= 0 {
		if j := bytes.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return crc16(key) & (NumSlots - 1)
}

// crc16 returns the CRC16-XMODEM of b, eight bytes at a time
// ("slicing-by-8", Kounavios and Berry, Intel, 2005): the CRC is linear,
// so the CRC of eight bytes following a CRC c is the XOR of each byte's own
// contribution, crc16Tables[k][x] for a byte x with k bytes after it, c
// folded into the first two. The eight lookups do not wait on each other,
// where the byte-at-a-time loop's each waits on the one before; the tail
// goes a byte at a time.
func crc16(b []byte) uint16 {
	var crc uint16
	t := &crc16Tables
	for ; len(b) >= 8; b = b[8:] {
		crc = t[7][b[0]^byte(crc>>8)] ^ t[6][b[1]^byte(crc)] ^
			t[5][b[2]] ^ t[4][b[3]] ^ t[3][b[4]] ^ t[2][b[5]] ^ t[1][b[6]] ^ t[0][b[7]]
	}
	for _, c := range b {
		crc = crc<<8 ^ t[0][byte(crc>>8)^c]
	}
	return crc
}

// crc16Tables[0][i] is the CRC16-XMODEM of the single byte i: the
// remainder of i<<8 divided by the polynomial 0x1021, bit by bit;
// crc16Tables[k][i] is the CRC of the byte i followed by k zero bytes.
var crc16Tables = func() (t [8][256]uint16) {
	for i := range t[0] {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[0][i] = crc
	}
	for k := 1; k < len(t); k++ {
		for i := range t[k] {
			c := t[k-1][i]
			t[k][i] = c<<8 ^ t[0][c>>8]
		}
	}
	return t
}()
