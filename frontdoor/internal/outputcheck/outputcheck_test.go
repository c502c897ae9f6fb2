package outputcheck

import "testing"

func TestModes(t *testing.T) {
	tests := []struct {
		name    string
		setting string
		calls   int
		want    int
	}{
		{"off validates nothing", "off", 250, 0},
		{"on validates everything", "on", 250, 250},
		{"sampled validates the first and one in SampleEvery", "sampled", 250, 3},
		{"the default is sampled", "", 2 * SampleEvery, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := ParseMode(tc.setting)
			if err != nil {
				t.Fatal(err)
			}
			s, got := New(m), 0
			for range tc.calls {
				if s.Due() {
					got++
				}
			}
			if got != tc.want {
				t.Errorf("%d of %d results validated, want %d", got, tc.calls, tc.want)
			}
		})
	}
}

func TestNilSamplerValidatesEverything(t *testing.T) {
	var s *Sampler
	for range 3 {
		if !s.Due() {
			t.Fatal("a nil Sampler skipped a result")
		}
	}
}

func TestParseModeRefusesUnknown(t *testing.T) {
	if _, err := ParseMode("sometimes"); err == nil {
		t.Fatal("ParseMode accepted an unknown mode")
	}
}

func BenchmarkDue(b *testing.B) {
	s := New(Sampled)
	for b.Loop() {
		s.Due()
	}
}
