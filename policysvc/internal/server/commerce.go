package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	policyv1 "github.com/agtpsuite/agtp/proto/agtp/policy/v1"
	"github.com/agtpsuite/agtp/services/agtp"
	"github.com/agtpsuite/agtp/services/jcs"
)

// ReasonInvalidAmount refuses a request whose body-read budget cost cannot
// be read (400): the amount or currency member is missing or malformed.
const ReasonInvalidAmount = "invalid-amount"

// maxInputLen bounds AuthorizeRequest.input_json; the front door does not
// send larger inputs.
const maxInputLen = 1 << 20

// maxAmountLen bounds an amount's text; the budget parser caps the
// integer part at 12 digits anyway.
const maxAmountLen = 32

// requestInput is a request's input, decoded once for every body-read
// cost that matches it.
type requestInput struct {
	raw    []byte
	parsed map[string]any
	err    error
	done   bool
}

func (in *requestInput) object() (map[string]any, error) {
	if !in.done {
		in.done = true
		in.parsed, in.err = decodeInput(in.raw)
	}
	return in.parsed, in.err
}

func decodeInput(raw []byte) (map[string]any, error) {
	if len(raw) == 0 {
		return nil, errors.New("the request input is not available to read it from")
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber() // the amount's text, not a float's
	var m map[string]any
	if err := d.Decode(&m); err != nil || m == nil {
		return nil, errors.New("the request input is not a JSON object")
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("the request input is not a single JSON object")
	}
	return m, nil
}

// member reads a dotted member path from an object.
func member(obj map[string]any, path string) (any, bool) {
	var v any = obj
	for name := range strings.SplitSeq(path, ".") {
		o, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = o[name]; !ok {
			return nil, false
		}
	}
	return v, true
}

func amountDenial(field, explanation string) *policyv1.Denial {
	return deny(agtp.StatusBadRequest, ReasonInvalidAmount, explanation, "field", field)
}

// bodyCost reads what a request spends from its input, as a one-item
// Budget in the cost's unit (or the request's currency).
func bodyCost(c EndpointCost, in *requestInput) (agtp.Budget, *policyv1.Denial) {
	obj, err := in.object()
	if err != nil {
		return nil, amountDenial(c.AmountField, "the budget check needs "+strconv.Quote(c.AmountField)+", but "+err.Error())
	}
	v, ok := member(obj, c.AmountField)
	if !ok {
		return nil, amountDenial(c.AmountField, "the request has no "+strconv.Quote(c.AmountField)+" to check against the Budget-Limit")
	}
	var amount string
	switch a := v.(type) {
	case string:
		amount = a
	case json.Number:
		amount = a.String()
	default:
		return nil, amountDenial(c.AmountField, strconv.Quote(c.AmountField)+" must be a decimal amount such as \"12.50\"")
	}
	if !isDecimal(amount) {
		return nil, amountDenial(c.AmountField, strconv.Quote(c.AmountField)+" must be a non-negative decimal such as \"12.50\", not "+quoteShort(amount))
	}
	unit := c.Unit
	if c.CurrencyField != "" {
		cv, ok := member(obj, c.CurrencyField)
		cur, isStr := cv.(string)
		switch {
		case !ok:
			return nil, amountDenial(c.CurrencyField, "the request has no "+strconv.Quote(c.CurrencyField)+" naming the amount's currency")
		case !isStr || !isMoneyUnit(cur):
			return nil, amountDenial(c.CurrencyField, strconv.Quote(c.CurrencyField)+" must be one of USD, EUR, GBP, not "+quoteShort(fmt.Sprint(cv)))
		}
		unit = cur
	}
	b, err := agtp.ParseBudget(unit + "=" + amount)
	if err != nil || len(b) != 1 {
		return nil, amountDenial(c.AmountField, strconv.Quote(c.AmountField)+" "+quoteShort(amount)+" is not a "+unit+" amount"+unitFormat(unit))
	}
	return b, nil
}

func unitFormat(unit string) string {
	if isMoneyUnit(unit) {
		return " (at most two decimals)"
	}
	switch strings.ToLower(unit) {
	case agtp.UnitTokens, agtp.UnitCalls, agtp.UnitTTL:
		return " (a whole number)"
	}
	return ""
}

func isMoneyUnit(s string) bool {
	return strings.EqualFold(s, agtp.UnitUSD) || strings.EqualFold(s, agtp.UnitEUR) || strings.EqualFold(s, agtp.UnitGBP)
}

// isDecimal accepts 1*DIGIT [ "." 1*DIGIT ]: no sign, exponent or
// separators, so an amount cannot smuggle a second budget element.
func isDecimal(s string) bool {
	if s == "" || len(s) > maxAmountLen {
		return false
	}
	ip, fp, dot := strings.Cut(s, ".")
	if ip == "" || dot && fp == "" {
		return false
	}
	for _, part := range []string{ip, fp} {
		for i := 0; i < len(part); i++ {
			if part[i] < '0' || part[i] > '9' {
				return false
			}
		}
	}
	return true
}

// quoteShort quotes a peer's value for an explanation, cut to 40 bytes.
func quoteShort(s string) string {
	if len(s) > 40 {
		s = s[:40] + "..."
	}
	return strconv.Quote(s)
}

// moneyOutsideLimit reports a spend in a currency the Budget-Limit does not
// name while it names others: the principal authorized money, but not in
// this currency, and the suite converts no currencies. (A limit that names
// no money at all leaves money unconstrained, as for fixed costs.)
func moneyOutsideLimit(limit, cost agtp.Budget) (agtp.BudgetItem, bool) {
	namesMoney := false
	for _, l := range limit {
		if l.Known && l.Currency != "" {
			namesMoney = true
		}
	}
	if !namesMoney {
		return agtp.BudgetItem{}, false
	}
	for _, c := range cost {
		if c.Currency == "" {
			continue
		}
		covered := false
		for _, l := range limit {
			if l.Known && l.Currency == c.Currency {
				covered = true
			}
		}
		if !covered {
			return c, true
		}
	}
	return agtp.BudgetItem{}, false
}

// maxManifestBytes bounds the Merchant Manifest Document file.
const maxManifestBytes = 1 << 20

// merchantManifest is a loaded Merchant Manifest Document.
type merchantManifest struct {
	canonical   []byte // RFC 8785 form
	fingerprint string // SHA-256 of canonical, lowercase hex
	merchantID  string // its merchant_id member, if a string
}

// loadMerchantManifest reads the document and fingerprints its canonical
// form, so that any serialization of the same document has one
// fingerprint.
func loadMerchantManifest(path string) (*merchantManifest, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxManifestBytes)
	}
	obj, err := jcs.ParseObject(data)
	if err != nil {
		return nil, fmt.Errorf("%s: not a JSON object in I-JSON: %w", path, err)
	}
	canonical, err := jcs.Append(nil, obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sum := sha256.Sum256(canonical)
	m := &merchantManifest{canonical: canonical, fingerprint: hex.EncodeToString(sum[:])}
	m.merchantID, _ = obj["merchant_id"].(string)
	return m, nil
}

// resolveMerchant loads the manifest file, if configured, into opts: its
// fingerprint, and the merchant ID when the options leave it to the
// document.
func resolveMerchant(m *MerchantOptions) (*merchantManifest, error) {
	if m.ManifestFile == "" {
		m.ManifestFingerprint = strings.ToLower(m.ManifestFingerprint)
		return nil, nil
	}
	doc, err := loadMerchantManifest(m.ManifestFile)
	if err != nil {
		return nil, fmt.Errorf("merchant.manifest_file: %w", err)
	}
	switch {
	case m.MerchantID == "" && doc.merchantID == "":
		return nil, fmt.Errorf("merchant: no merchant_id in the options or in %s", m.ManifestFile)
	case m.MerchantID == "":
		m.MerchantID = doc.merchantID
	case doc.merchantID != "" && doc.merchantID != m.MerchantID:
		return nil, fmt.Errorf("merchant.merchant_id %q differs from the merchant_id %q of %s", m.MerchantID, doc.merchantID, m.ManifestFile)
	}
	m.ManifestFingerprint = doc.fingerprint
	return doc, nil
}

// GetMerchant returns this server's merchant identity.
func (s *Server) GetMerchant(context.Context, *policyv1.GetMerchantRequest) (*policyv1.GetMerchantResponse, error) {
	m := s.opts.Merchant
	if m.MerchantID == "" {
		return &policyv1.GetMerchantResponse{}, nil
	}
	out := &policyv1.GetMerchantResponse{
		Configured:          true,
		MerchantId:          m.MerchantID,
		ManifestFingerprint: m.ManifestFingerprint,
		Status:              m.Status,
	}
	if s.manifest != nil {
		//lint:ignore SA1019 the first release's field, filled for its clients beside Manifest
		out.ManifestJson, out.Manifest = s.manifest.canonical, string(s.manifest.canonical)
	}
	return out, nil
}
