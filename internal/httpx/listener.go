package httpx

import (
	"io"
	"net"
	"sync"
)

// limitListener caps the connections open at once at n: Accept waits for
// one to close when n are open. It is golang.org/x/net/netutil's
// LimitListener but for one thing: a connection keeps the ReadFrom of the
// one accepted. net/http sends a file body (a sealed batch's samples,
// hundreds of MB) with sendfile only through a connection that has it;
// netutil's wrapper hides it, and every body went through a 32 KiB buffer
// instead, one write(2) each.
func limitListener(l net.Listener, n int) net.Listener {
	return &limitedListener{Listener: l, slots: make(chan struct{}, n), closed: make(chan struct{})}
}

type limitedListener struct {
	net.Listener
	slots     chan struct{}
	closed    chan struct{}
	closeOnce sync.Once
}

func (l *limitedListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.closed:
		// Closed while waiting for a slot: the listener's own Accept
		// returns its error at once.
		for {
			c, err := l.Listener.Accept()
			if err != nil {
				return nil, err
			}
			c.Close()
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	lc := &limitedConn{Conn: c, free: func() { <-l.slots }}
	if rf, ok := c.(io.ReaderFrom); ok {
		return &limitedReaderFrom{limitedConn: lc, rf: rf}, nil
	}
	return lc, nil
}

func (l *limitedListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.closed) })
	return err
}

// limitedConn gives its slot back when it is first closed.
type limitedConn struct {
	net.Conn
	once sync.Once
	free func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.free)
	return err
}

// limitedReaderFrom is a limitedConn whose connection has ReadFrom (a
// *net.TCPConn: sendfile and splice).
type limitedReaderFrom struct {
	*limitedConn
	rf io.ReaderFrom
}

func (c *limitedReaderFrom) ReadFrom(r io.Reader) (int64, error) { return c.rf.ReadFrom(r) }
