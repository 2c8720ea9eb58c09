package webhooks

// SealChatMessage seals data at path as the runtime seals a chat message it
// writes, keyed from the webhook secret: for tests that write documents as
// an older runtime left them.
func SealChatMessage(secret, path string, data map[string]any) map[string]any {
	return newSealer(secret).seal(path, data, chatMessageSeal)
}
