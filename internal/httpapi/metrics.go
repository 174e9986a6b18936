package httpapi

import (
	"strconv"
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
	rateLimitUnavailable = promauto.NewCounter(prometheus.CounterOpts{
		Name: "paysvc_ratelimit_unavailable_total",
		Help: "API requests let through unlimited because the rate limiter's Redis did not answer in time (or failed).",
	})
)

// metrics records each request's status and latency by route template, so
// ids never become label values.
func metrics(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	requestsTotal.WithLabelValues(c.Request.Method, route, strconv.Itoa(c.Writer.Status())).Inc()
	requestSeconds.WithLabelValues(c.Request.Method, route).Observe(time.Since(start).Seconds())
}
