package httpapi

import (
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	requestsTotal = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "paysvc_http_requests_total",
		Help: "API requests by route and status.",
	}, []string{"method", "route", "status"})
	requestSeconds = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "paysvc_http_request_duration_seconds",
		Help:    "API request latency by route.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"method", "route"})
	unknownKeyRefusals = promauto.NewCounter(prometheus.CounterOpts{
		Name: "paysvc_unknown_key_refusals_total",
		Help: "Client addresses refused by this API process for too many requests with API keys that do not exist (RATE_LIMIT_UNKNOWN_KEYS_PER_MINUTE), counted when a refusal starts.",
	})
	rateLimitUnavailable = promauto.NewCounter(prometheus.CounterOpts{
		Name: "paysvc_ratelimit_unavailable_total",
		Help: "Rate-limit decisions skipped because Redis did not answer in time (or failed): API requests let through unlimited, and strikes for unknown API keys not counted.",
	})
)

// metrics records each request's status and latency by route template, so
// ids never become label values.
func metrics(c *gin.Context) {
	start := time.Now()
	c.Next()
	route, method := c.FullPath(), c.Request.Method
	if route == "" {
		route = "unmatched"
		if !knownMethods[method] {
			method = "other" // a client's method must not become a label value
		}
	}
	m := routeMetricsOf(method, route)
	m.counter(c.Writer.Status()).Inc()
	m.seconds.Observe(time.Since(start).Seconds())
}

var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true,
	http.MethodDelete: true, http.MethodConnect: true, http.MethodOptions: true, http.MethodTrace: true,
}

// A route's series are looked up once: WithLabelValues hashes every label
// value on each call, twice a request. The lookup itself allocates nothing
// and takes no lock: the table is replaced whole when a route is first
// seen (a few dozen times in a process's life).
type routeKey struct{ method, route string }

type routeMetrics struct {
	key     routeKey
	seconds prometheus.Observer
	// byStatus holds the requests counter of each status (100–599)
	// answered on the route so far.
	byStatus [600]atomic.Pointer[prometheus.Counter]
}

var (
	routesMu sync.Mutex // serialises the table's replacement
	routes   atomic.Pointer[map[routeKey]*routeMetrics]
)

func init() { routes.Store(&map[routeKey]*routeMetrics{}) }

func routeMetricsOf(method, route string) *routeMetrics {
	k := routeKey{method, route}
	if m, ok := (*routes.Load())[k]; ok {
		return m
	}
	routesMu.Lock()
	defer routesMu.Unlock()
	cur := *routes.Load()
	if m, ok := cur[k]; ok {
		return m // added while this call waited for the lock
	}
	t := maps.Clone(cur)
	m := &routeMetrics{key: k, seconds: requestSeconds.WithLabelValues(method, route)}
	t[k] = m
	routes.Store(&t)
	return m
}

func (m *routeMetrics) counter(status int) prometheus.Counter {
	if status < 100 || status >= len(m.byStatus) {
		return requestsTotal.WithLabelValues(m.key.method, m.key.route, strconv.Itoa(status))
	}
	if c := m.byStatus[status].Load(); c != nil {
		return *c
	}
	// Two requests may both get here: WithLabelValues returns the same
	// series to each.
	c := requestsTotal.WithLabelValues(m.key.method, m.key.route, strconv.Itoa(status))
	m.byStatus[status].Store(&c)
	return c
}
