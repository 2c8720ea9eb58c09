package auth

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// LoadOrCreateSecret returns the signing secret kept in the file at path,
// creating it on first use: 32 random bytes, mode 0600, fsynced (file and
// directory) before it is used, so tokens signed with it survive a crash.
// The file is published with a hard link, which never replaces an existing
// file: when two processes race, both end up with the one that won. An
// existing file shorter than MinSecretBytes is an error, never overwritten.
func LoadOrCreateSecret(path string) ([]byte, error) {
	if b, err := readSecret(path); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return b, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("auth: create secret: %w", err)
	}
	secret := make([]byte, MinSecretBytes)
	rand.Read(secret) // never fails (crypto/rand crashes the program instead)

	f, err := os.CreateTemp(dir, ".secret-*") // mode 0600
	if err != nil {
		return nil, fmt.Errorf("auth: create secret: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(secret)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("auth: write secret: %w", err)
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) { // another process created it first
			return readSecret(path)
		}
		return nil, fmt.Errorf("auth: create secret: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return nil, fmt.Errorf("auth: create secret: %w", err)
	}
	return secret, nil
}

func readSecret(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("auth: read secret: %w", err)
	}
	if len(b) < MinSecretBytes {
		return nil, fmt.Errorf("auth: secret file %s holds %d bytes, need at least %d", path, len(b), MinSecretBytes)
	}
	return b, nil
}

// syncDir makes a new directory entry durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
