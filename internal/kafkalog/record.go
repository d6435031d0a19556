package kafkalog

import (
	"strconv"
	"time"
)

// Header is one header of a Kafka record.
type Header struct {
	Key   string
	Value []byte
}

// Record is one record to append with [Writer.Append].
type Record struct {
	Key     []byte
	Value   []byte
	Headers []Header
}

// Message is one record read back from the log, with where it sits.
type Message struct {
	Topic     string
	Partition int
	Offset    int64
	// HighWaterMark is the partition's log end as the fetch that returned
	// the record saw it.
	HighWaterMark int64
	// Time is the record's timestamp (the producer's append time).
	Time    time.Time
	Key     []byte
	Value   []byte
	Headers []Header
}

// Position is where Kafka stored a record.
type Position struct {
	Partition int32 `json:"partition"`
	Offset    int64 `json:"offset"`
}

// Header keys every record of the ledger carries. The trace context
// ([HeaderTraceparent]) is set by the [Writer] from the context of the
// append, never by callers.
const (
	HeaderType        = "type"
	HeaderVersion     = "v"
	HeaderTraceparent = "traceparent"
)

// TypeHeaders are the headers that name a record's type and schema
// version: what a consumer may route on without decoding the value.
func TypeHeaders(typ string, version int) []Header {
	return []Header{
		{Key: HeaderType, Value: []byte(typ)},
		{Key: HeaderVersion, Value: []byte(strconv.Itoa(version))},
	}
}

// HeaderValue returns the value of the first header named key.
func HeaderValue(h []Header, key string) ([]byte, bool) {
	for _, x := range h {
		if x.Key == key {
			return x.Value, true
		}
	}
	return nil, false
}
