package config_test

import (
	"strings"
	"testing"

	"paysvc/internal/config"
)

func TestRedisOptions(t *testing.T) {
	t.Parallel()
	o, err := config.RedisOptions("redis-sentinel://:sentpw@10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/2?master=pay", "masterpw")
	if err != nil {
		t.Fatal(err)
	}
	if o.MasterName != "pay" || strings.Join(o.Addrs, ",") != "10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379" ||
		o.SentinelPassword != "sentpw" || o.Password != "masterpw" || o.DB != 2 {
		t.Errorf("sentinel URL: got master %q addrs %v sentinel password %q password %q db %d",
			o.MasterName, o.Addrs, o.SentinelPassword, o.Password, o.DB)
	}
	if o, err = config.RedisOptions("redis-sentinel://h1:26379/?master=m", ""); err != nil || o.DB != 0 || o.SentinelPassword != "" {
		t.Errorf("sentinel URL without password or db: %+v, %v", o, err)
	}

	o, err = config.RedisOptions("rediss://u:urlpw@cache:6380/3", "envpw")
	if err != nil || o.MasterName != "" || o.Addrs[0] != "cache:6380" || o.Password != "urlpw" || o.Username != "u" || o.DB != 3 || o.TLSConfig == nil {
		t.Errorf("rediss URL: got %+v, %v; the URL's password wins, TLS on", o, err)
	}
	if o, err = config.RedisOptions("redis://cache:6379/0", "envpw"); err != nil || o.Password != "envpw" || o.TLSConfig != nil {
		t.Errorf("redis URL with REDIS_PASSWORD: got %+v, %v", o, err)
	}

	for _, bad := range []string{
		"http://cache:6379",
		"redis-sentinel://h1:26379,h2:26379/0",           // no master
		"redis-sentinel://h1,h2/0?master=m",              // no ports
		"redis-sentinel://h1:26379/x?master=m",           // db not a number
		"redis-sentinel://h1:26379/0?master=m&pool=3",    // unknown parameter
		"redis://:secret-in-url@cache:6379/not-a-number", // the error must not echo it
	} {
		_, err := config.RedisOptions(bad, "")
		if err == nil {
			t.Errorf("RedisOptions(%q): got nil error, want one", bad)
		} else if strings.Contains(err.Error(), "secret-in-url") {
			t.Errorf("RedisOptions(%q): error %q shows the password", bad, err)
		}
	}
}
