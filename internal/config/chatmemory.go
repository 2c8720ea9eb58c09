package config

import (
	"fmt"
	"time"
)

// MaxChatHistory bounds [agents] chat_history: the orchestrator reads that
// many messages for every decision.
const MaxChatHistory = 500

// MaxChatTimer bounds chat_suspend_after and chat_cleanup_after: a chat's
// timer is a scheduled delivery, at most 366 days ahead.
const MaxChatTimer = 365 * 24 * time.Hour

// SignedDuration is a duration that may be zero or negative ("0s", "-1h"),
// for settings where those mean "never"; Set tells a value from an absent
// key.
type SignedDuration struct {
	time.Duration
	Set bool
}

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *SignedDuration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	d.Duration, d.Set = v, true
	return nil
}

// validateChat checks the chat memory keys of [agents].
func (a *Agents) validateChat() error {
	if n := a.ChatHistory; n < 0 || n > MaxChatHistory {
		return fmt.Errorf("config: [agents] chat_history must be between 1 and %d (0: the default, 20), got %d", MaxChatHistory, n)
	}
	// The runtime's timers are scheduled deliveries, which may be at most
	// 366 days ahead.
	if d := a.ChatSuspendAfter.Duration; d > MaxChatTimer {
		return fmt.Errorf("config: [agents] chat_suspend_after must be at most %s, got %s", MaxChatTimer, d)
	}
	if d := a.ChatCleanupAfter.Duration; d > MaxChatTimer {
		return fmt.Errorf("config: [agents] chat_cleanup_after must be at most %s, got %s", MaxChatTimer, d)
	}
	return nil
}
