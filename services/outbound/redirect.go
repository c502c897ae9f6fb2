package outbound

import (
	"errors"
	"fmt"
	"net/http"
)

// maxRedirects bounds the redirects HTTPSRedirectsOnly follows, as
// net/http does by default.
const maxRedirects = 10

// HTTPSRedirectsOnly returns a copy of hc that follows a redirect only to
// an https URL (then hc's own CheckRedirect, if any, decides; else at
// most 10): what is fetched over plain HTTP, a key set say, could be
// anyone's.
func HTTPSRedirectsOnly(hc *http.Client) *http.Client {
	cp, next := *hc, hc.CheckRedirect
	cp.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Scheme != "https" {
			return fmt.Errorf("redirect to a %s URL refused: only https is accepted", req.URL.Scheme)
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= maxRedirects {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &cp
}
