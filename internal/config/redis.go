package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RedisOptions parses REDIS_URL, the one place that does: the process
// builds one go-redis client from the result and hands it to Asynq (its
// client and server), the rate limiters and the dashboard's sign-in
// counters. Forms:
//
//	redis://[[user]:password@]host:port/DB      one server (go-redis's URL form)
//	rediss://…                                  the same over TLS
//	redis-sentinel://[:SENTINEL_PASSWORD@]host1:26379,host2:26379,host3:26379/DB?master=NAME
//
// The last asks the sentinels for master NAME and follows it across
// failovers (Asynq's spelling of the form). password (REDIS_PASSWORD), when
// set, is the server's password: the master's under Sentinel, or one the
// redis:// URL does not carry.
func RedisOptions(rawURL, password string) (*redis.UniversalOptions, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, errors.New("not a URL")
	}
	if u.Scheme != "redis-sentinel" {
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, err
		}
		if o.Password == "" {
			o.Password = password
		}
		return &redis.UniversalOptions{
			Addrs: []string{o.Addr}, Username: o.Username, Password: o.Password, DB: o.DB,
			TLSConfig: o.TLSConfig, DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
			PoolSize: o.PoolSize, MaxRetries: o.MaxRetries, ClientName: o.ClientName,
		}, nil
	}
	o := &redis.UniversalOptions{Password: password}
	for _, addr := range strings.Split(u.Host, ",") {
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			return nil, fmt.Errorf("sentinel address %q: want host:port", addr)
		}
		o.Addrs = append(o.Addrs, addr)
	}
	if u.User != nil {
		o.SentinelPassword, _ = u.User.Password()
	}
	if db := strings.Trim(u.Path, "/"); db != "" {
		if o.DB, err = strconv.Atoi(db); err != nil || o.DB < 0 {
			return nil, fmt.Errorf("database %q: want a number", db)
		}
	}
	for k := range u.Query() {
		if k != "master" {
			return nil, fmt.Errorf("unknown parameter %q (only master=NAME)", k)
		}
	}
	if o.MasterName = u.Query().Get("master"); o.MasterName == "" {
		return nil, errors.New("redis-sentinel:// needs ?master=NAME")
	}
	return o, nil
}
