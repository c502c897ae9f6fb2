package edsign_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/agtpsuite/agtp/services/edsign"
)

func TestSignIsCryptoEd25519s(t *testing.T) {
	// RFC 8032 §7.1 test 1's seed, and fresh keys.
	seed := []byte{
		0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4, 0x92, 0xec, 0x2c, 0xc4,
		0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19, 0x70, 0x3b, 0xac, 0x03, 0x1c, 0xae, 0x7f, 0x60,
	}
	keys := []ed25519.PrivateKey{ed25519.NewKeyFromSeed(seed)}
	for range 3 {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	rfcEmpty := "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"
	for i, priv := range keys {
		k, err := edsign.NewKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(k.Public(), priv.Public().(ed25519.PublicKey)) {
			t.Fatalf("key %d: public key differs", i)
		}
		clear(k.Public()) // a caller's copy: the key's own must not change
		for _, n := range []int{0, 1, 63, 64, 111, 112, 128, 1102, 4096} {
			msg := make([]byte, n)
			if _, err := rand.Read(msg); err != nil {
				t.Fatal(err)
			}
			if i == 0 && n == 0 {
				if got := k.Sign(msg); fmt.Sprintf("%x", got) != rfcEmpty {
					t.Fatalf("RFC 8032 test 1: got %x", got)
				}
			}
			got := k.Sign(msg)
			if want := ed25519.Sign(priv, msg); !bytes.Equal(got[:], want) {
				t.Fatalf("key %d, %d bytes: got %x, crypto/ed25519 %x", i, n, got, want)
			}
		}
	}
}

func TestNewKeyRefusesBadKeys(t *testing.T) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	mismatched := bytes.Clone(priv)
	mismatched[40] ^= 1
	for name, key := range map[string]ed25519.PrivateKey{
		"short":             priv[:32],
		"empty":             nil,
		"public half wrong": mismatched,
	} {
		if _, err := edsign.NewKey(key); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzSignIsCryptoEd25519s(f *testing.F) {
	f.Add(make([]byte, 32), []byte("record"))
	f.Fuzz(func(t *testing.T, seedInput, msg []byte) {
		// Every input makes a key: the fuzzer's seeds are rarely 32 bytes.
		seed := sha256.Sum256(seedInput)
		priv := ed25519.NewKeyFromSeed(seed[:])
		k, err := edsign.NewKey(priv)
		if err != nil {
			t.Fatal(err)
		}
		if got := k.Sign(msg); !bytes.Equal(got[:], ed25519.Sign(priv, msg)) {
			t.Fatalf("differs from crypto/ed25519")
		}
	})
}

// BenchmarkSign signs a record-sized message (an Attribution-Record's
// signing input is about 1.1 KB) with crypto/ed25519 and with a Key.
func BenchmarkSign(b *testing.B) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	k, err := edsign.NewKey(priv)
	if err != nil {
		b.Fatal(err)
	}
	msg := make([]byte, 1100)
	b.Run("crypto-ed25519", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ed25519.Sign(priv, msg)
		}
	})
	b.Run("edsign", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			k.Sign(msg)
		}
	})
}
