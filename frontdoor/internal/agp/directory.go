package agp

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/agtpsuite/agtp/frontdoor/internal/pipeline"
	"github.com/agtpsuite/agtp/services/agtp"
)

// directory serves GET /agp/businesses (AGP §7.1), public, as an
// anonymous DISCOVER /methods.
func (h *Handler) directory(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, agtp.MethodDiscover)
	q := r.URL.Query()
	filter := func(name string) string {
		v := strings.TrimSpace(q.Get(name))
		if len(v) > 128 {
			v = v[:128]
		}
		return strings.ToLower(v)
	}
	category, platform, text := filter("category"), filter("platform"), filter("q")
	out := h.o.Pipeline.ServeBound(r.Context(), &pipeline.Bound{
		Request: c.request(agtp.MethodDiscover, "/methods", nil),
		Conn:    c.conn(),
		Intercept: func(_ context.Context, v *pipeline.View) *agtp.Response {
			list := []directoryEntry{}
			for _, b := range businesses(v.State) {
				e := b.entry()
				if !b.active() ||
					category != "" && strings.ToLower(e.Category) != category ||
					platform != "" && strings.ToLower(e.Platform) != platform ||
					text != "" && !strings.Contains(strings.ToLower(e.Name), text) {
					continue
				}
				list = append(list, e)
			}
			b, _ := json.Marshal(map[string]any{"businesses": list})
			return agtp.NewResponse(http.StatusOK, ContentType, b)
		},
		Shape: c.shapeRefusal,
	})
	c.write(out)
}

// health serves GET /health (AGP §17.1): liveness, no authentication, no
// audit record (a probe must not grow the server's chain).
func (h *Handler) health(w http.ResponseWriter, r *http.Request) {
	c := h.begin(w, r, agtp.MethodDiscover)
	c.writeDirect(http.StatusOK, map[string]any{
		"status": "ok", "version": h.o.Version, "environment": "agtp",
		"ready":     h.o.Catalog.Current() != nil,
		"timestamp": time.Now().UTC().Format("2006-01-02T15:04:05.000Z"),
	})
}
