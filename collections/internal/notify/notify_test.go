package notify

import "testing"

func TestWakeClosesCurrentChannelOnly(t *testing.T) {
	var b Broadcaster
	c := b.C()
	if c != b.C() {
		t.Fatal("C changed without a Wake")
	}
	b.Wake()
	select {
	case <-c:
	default:
		t.Fatal("Wake did not close the waiter's channel")
	}
	next := b.C()
	select {
	case <-next:
		t.Fatal("the channel after Wake is already closed")
	default:
	}
	b.Wake() // a Wake with no waiter in between closes the new one
	select {
	case <-next:
	default:
		t.Fatal("second Wake did not close the channel")
	}
}
