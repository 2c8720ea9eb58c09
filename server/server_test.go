package server_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/loomdb/loom/server"
)

// signalListener reports (once) when the server asks a connection for more
// bytes after it has read want of them. The test sends want bytes: the
// whole header and part of the body, so the server then reads the rest of
// the body in the handler — the request is in flight. (Its first read is no
// such sign: net/http drops a request whose headers it is still reading
// when Shutdown starts.)
type signalListener struct {
	net.Listener
	want int64
	once sync.Once
	read chan struct{}
}

func (l *signalListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &signalConn{Conn: c, l: l}, nil
}

type signalConn struct {
	net.Conn
	l    *signalListener
	seen atomic.Int64
}

func (c *signalConn) Read(p []byte) (int, error) {
	if c.seen.Load() >= c.l.want {
		c.l.once.Do(func() { close(c.l.read) })
	}
	n, err := c.Conn.Read(p)
	c.seen.Add(int64(n))
	return n, err
}

// TestServer_Serve_GracefulShutdown cancels Serve's context while a request
// body is still arriving: the listener closes, but the request completes
// with its normal response and Serve returns nil.
func TestServer_Serve_GracefulShutdown(t *testing.T) {
	t.Parallel()
	st := MustOpenStore(t)
	srv, err := server.New(st, server.Config{AdminKey: testAdminKey})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	first, rest := `{"id":"slow",`, `"a":1}`
	head := fmt.Sprintf("POST /api/v1/databases/default/documents/rooms HTTP/1.1\r\nHost: loom\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		testAdminKey, len(first)+len(rest), first)
	ln := &signalListener{Listener: inner, want: int64(len(head)), read: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()

	addr := inner.Addr().String()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ln.read:
	case <-time.After(10 * time.Second):
		t.Fatal("server never asked for the rest of the body")
	}

	cancel()
	// Shutdown closes the listener first; wait until new connections fail,
	// so the rest of the body surely arrives during shutdown.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("listener still accepting after cancel")
		}
		runtime.Gosched()
	}

	if _, err := io.WriteString(conn, rest); err != nil {
		t.Fatalf("write rest of body: %v", err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Errorf("in-flight request status=%d body=%s, want 201", res.StatusCode, body)
	}

	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve=%v, want nil", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return")
	}
	if _, err := st.Get(context.Background(), "default", "rooms/slow"); err != nil {
		t.Errorf("Get after shutdown: %v, want the document committed", err)
	}
}
