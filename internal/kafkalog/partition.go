package kafkalog

// PartitionOf is the partition of a topic with n partitions that a record
// keyed key goes to: the Java client's default partitioner for keyed
// records (murmur2 of the key, sign bit cleared, modulo n), which the
// Python client and franz-go's StickyKeyPartitioner follow as well. Every
// producer of the ledger, whatever its language, so puts a run's records
// in one partition, and every reader of a run finds them there.
func PartitionOf(key []byte, n int) int {
	if n <= 0 {
		return 0
	}
	return int(murmur2(key)&0x7fffffff) % n
}

// murmur2 is the 32-bit MurmurHash2 with the seed Kafka's Java client uses.
func murmur2(data []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	n := len(data)
	h := seed ^ uint32(n)
	for ; len(data) >= 4; data = data[4:] {
		k := uint32(data[0]) | uint32(data[1])<<8 | uint32(data[2])<<16 | uint32(data[3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	switch len(data) {
	case 3:
		h ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
