package intent

import (
	"strings"
	"unicode"

	"github.com/blevesearch/snowballstem"
	"github.com/blevesearch/snowballstem/english"
)

// Text analysis: Unicode word tokens, lower-cased, English stop words
// removed, Snowball (Porter2) English stems. Intents and endpoint texts go
// through the same analysis, so "cancelled orders" meets "Cancel the open
// order".

// maxTokens bounds the tokens taken from one text: an intent is a
// sentence, not a document, and a caller controls it.
const maxTokens = 64

// maxTokenLen drops longer "words" (base64, hashes): they never match.
const maxTokenLen = 40

// token is one analysed word: its stem and the word as written.
type token struct {
	stem, word string
	// id marks a word holding a digit (ord-1001's 1001, r-7): a value
	// naming one thing rather than a kind.
	id bool
}

// analyze splits text into tokens. Separators are anything but letters
// and digits, so snake_case, kebab-case, paths and {params} split into
// their words; camelCase is split at each upper-case letter that follows a
// lower-case one.
func analyze(text string) []token {
	var out []token
	env := snowballstem.NewEnv("")
	emit := func(w string) {
		if w == "" || len(out) >= maxTokens || len(w) > maxTokenLen {
			return
		}
		lw := strings.ToLower(w)
		hasDigit := strings.IndexFunc(lw, unicode.IsDigit) >= 0
		if stopWords[lw] {
			return
		}
		stem := lw
		if !hasDigit {
			env.SetCurrent(lw)
			english.Stem(env)
			stem = env.Current()
		}
		out = append(out, token{stem: stem, word: w, id: hasDigit})
	}
	start := -1
	var prev rune
	for i, r := range text {
		word := unicode.IsLetter(r) || unicode.IsDigit(r)
		switch {
		case !word:
			if start >= 0 {
				emit(text[start:i])
				start = -1
			}
		case start < 0:
			start = i
		case unicode.IsUpper(r) && unicode.IsLower(prev):
			emit(text[start:i])
			start = i
		}
		prev = r
		if len(out) >= maxTokens {
			return out
		}
	}
	if start >= 0 {
		emit(text[start:])
	}
	return out
}

// stopWords is the Snowball project's English stop word list (the list
// the Snowball English stemmer is published with, and the one Lucene and
// bleve use for English), so words like "the", "my", "for" never decide a
// match.
var stopWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(snowballEnglishStop) {
		// The tokenizer splits at the apostrophe: "don't" is "don" and
		// "t", and the fragments are stop words too.
		for _, part := range strings.Split(w, "'") {
			m[part] = true
		}
	}
	return m
}()

const snowballEnglishStop = `
i me my myself we our ours ourselves you your yours yourself yourselves
he him his himself she her hers herself it its itself they them their
theirs themselves what which who whom this that these those am is are was
were be been being have has had having do does did doing would should
could ought i'm you're he's she's it's we're they're i've you've we've
they've i'd you'd he'd she'd we'd they'd i'll you'll he'll she'll we'll
they'll isn't aren't wasn't weren't hasn't haven't hadn't doesn't don't
didn't won't wouldn't shan't shouldn't can't cannot couldn't mustn't
let's that's who's what's here's there's when's where's why's how's a an
the and but if or because as until while of at by for with about against
between into through during before after above below to from up down in
out on off over under again further then once here there when where why
how all any both each few more most other some such no nor not only own
same so than too very
`
