// Command compat-acl-go is the Go half of tests/compat/acl.sh: the Apache RocketMQ Go client
// (rocketmq-client-go v2) with producer.WithCredentials / consumer.WithCredentials against a broker with ACL on.
//
// Checks (one line each, "ok go-VERSION/NAME: detail" or "FAIL go-VERSION/NAME: reason"; exit 1 if any failed):
//
//	send           the producer user sends -n messages to -topic, all SEND_OK
//	consume        the consumer user's push consumer (group -group) gets all of them
//	lacks-pub      a send to -sub-only-topic (the producer has SUB, not PUB) is refused by the broker: CODE: 16
//	no-perm-topic  a send to -no-perm-topic (no permission at all) fails: the name server refuses the route
//	unsigned       a producer without credentials cannot send to -topic
//
// The name server address comes from -ns.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

const clientModule = "github.com/apache/rocketmq-client-go/v2"

var (
	prefix   string
	failures int
	logs     = &recorder{}
)

// recorder is the client's logger: it writes warnings and errors to stderr and keeps the errors they
// carry, so that a check can see what the name server answered when the client reports only "route info
// not found" (the client logs the answer, "query topic route from server error", and keeps it to itself).
type recorder struct {
	mu     sync.Mutex
	errors []string
}

func (r *recorder) log(level, msg string, fields map[string]interface{}) {
	fmt.Fprintf(os.Stderr, "%s %s %s %v\n", time.Now().Format("15:04:05.000"), level, msg, fields)
	if e, ok := fields[rlog.LogKeyUnderlayError]; ok && e != nil {
		r.mu.Lock()
		r.errors = append(r.errors, msg+": "+fmt.Sprint(e))
		r.mu.Unlock()
	}
}

// since returns the index to pass to find later.
func (r *recorder) since() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.errors) }

// find returns the first error logged after mark containing every one of parts.
func (r *recorder) find(mark int, parts ...string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
next:
	for _, e := range r.errors[mark:] {
		for _, p := range parts {
			if !strings.Contains(e, p) {
				continue next
			}
		}
		return e
	}
	return ""
}

func (r *recorder) Debug(string, map[string]interface{})              {}
func (r *recorder) Info(string, map[string]interface{})               {}
func (r *recorder) Warning(msg string, fields map[string]interface{}) { r.log("WARN", msg, fields) }
func (r *recorder) Error(msg string, fields map[string]interface{})   { r.log("ERROR", msg, fields) }
func (r *recorder) Fatal(msg string, fields map[string]interface{})   { r.log("FATAL", msg, fields) }
func (r *recorder) Level(string)                                      {}
func (r *recorder) OutputPath(string) error                           { return nil }

func ok(name, format string, args ...interface{}) {
	fmt.Printf("ok %s/%s: %s\n", prefix, name, fmt.Sprintf(format, args...))
}

func fail(name, format string, args ...interface{}) {
	failures++
	fmt.Printf("FAIL %s/%s: %s\n", prefix, name, fmt.Sprintf(format, args...))
}

func clientVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == clientModule {
				return d.Version
			}
		}
	}
	return "unknown"
}

func credentials(akSk string) primitive.Credentials {
	ak, sk, _ := strings.Cut(akSk, ":")
	return primitive.Credentials{AccessKey: ak, SecretKey: sk}
}

func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// routeRefused: a send by p to topic must fail, and the client must have logged the name server's
// NO_PERMISSION answer to its route request, with why in the remark.
func routeRefused(name string, p rocketmq.Producer, topic, why string) {
	mark := logs.since()
	_, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte("must be refused")))
	if err == nil {
		fail(name, "send to %s succeeded", topic)
		return
	}
	if answer := logs.find(mark, "CODE: 16", why); answer != "" {
		ok(name, "send to %s failed on the client: %s; the client logged the name server's answer: %s", topic, oneLine(err), answer)
	} else {
		fail(name, "send to %s failed (%s) but the client logged no route refusal with CODE: 16 and %q", topic, oneLine(err), why)
	}
}

func main() {
	ns := flag.String("ns", "", "name server host:port")
	topic := flag.String("topic", "", "topic the producer may PUB and the consumer SUB")
	subOnly := flag.String("sub-only-topic", "", "topic the producer has SUB on, not PUB")
	noPerm := flag.String("no-perm-topic", "", "topic the producer has no permission on")
	prod := flag.String("producer", "", "AK:SK of the producer user")
	cons := flag.String("consumer", "", "AK:SK of the consumer user")
	group := flag.String("group", "", "consumer group of the consumer user")
	pgroup := flag.String("pgroup", "AclGoProducer", "producer group")
	n := flag.Int("n", 50, "messages to send")
	deadline := flag.Duration("deadline", 60*time.Second, "how long the consumer may take")
	flag.Parse()

	rlog.SetLogger(logs)
	prefix = "go-" + clientVersion()
	run := fmt.Sprintf("%x", time.Now().UnixNano())
	resolver := primitive.NewPassthroughResolver([]string{*ns})
	ctx := context.Background()

	newProducer := func(instance string, creds *primitive.Credentials) (rocketmq.Producer, error) {
		opts := []producer.Option{
			producer.WithNsResolver(resolver),
			producer.WithGroupName(*pgroup),
			// One client instance per producer: instances are shared by ID within a process, with the
			// credentials of whichever was created first.
			producer.WithInstanceName(instance + "-" + run),
			producer.WithSendMsgTimeout(5 * time.Second),
			producer.WithRetry(2),
		}
		if creds != nil {
			opts = append(opts, producer.WithCredentials(*creds))
		}
		p, err := rocketmq.NewProducer(opts...)
		if err != nil {
			return nil, err
		}
		return p, p.Start()
	}

	// send
	pc := credentials(*prod)
	p, err := newProducer("producer", &pc)
	if err != nil {
		fail("send", "producer did not start: %v", err)
		os.Exit(1)
	}
	sendOK := 0
	firstErr := ""
	for i := 0; i < *n; i++ {
		msg := primitive.NewMessage(*topic, []byte(fmt.Sprintf("acl %s #%d", run, i)))
		msg.WithKeys([]string{fmt.Sprintf("%s-%d", run, i)})
		res, err := p.SendSync(ctx, msg)
		switch {
		case err != nil:
			if firstErr == "" {
				firstErr = fmt.Sprintf("message %d: %s", i, oneLine(err))
			}
		case res.Status != primitive.SendOK:
			if firstErr == "" {
				firstErr = fmt.Sprintf("message %d: status %d", i, res.Status)
			}
		default:
			sendOK++
		}
	}
	if sendOK == *n {
		ok("send", "%d messages to %s as %s, all SEND_OK", *n, *topic, pc.AccessKey)
	} else {
		fail("send", "%d/%d SEND_OK; first problem: %s", sendOK, *n, firstErr)
	}

	// consume
	cc := credentials(*cons)
	var mu sync.Mutex
	seen := map[string]bool{}
	c, err := rocketmq.NewPushConsumer(
		consumer.WithNsResolver(resolver),
		consumer.WithGroupName(*group),
		consumer.WithInstance("consumer-"+run),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithCredentials(cc),
	)
	if err != nil {
		fail("consume", "NewPushConsumer: %v", err)
	} else {
		err = c.Subscribe(*topic, consumer.MessageSelector{}, func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range ms {
				if k := m.GetKeys(); strings.HasPrefix(k, run+"-") {
					seen[k] = true
				}
			}
			return consumer.ConsumeSuccess, nil
		})
		t0 := time.Now()
		if err == nil {
			err = c.Start()
		}
		if err != nil {
			fail("consume", "push consumer did not start: %s", oneLine(err))
		} else {
			count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
			for count() < sendOK && time.Since(t0) < *deadline {
				time.Sleep(50 * time.Millisecond)
			}
			if got := count(); sendOK > 0 && got == sendOK {
				ok("consume", "%d/%d messages consumed as %s (group %s) in %d ms", got, sendOK, cc.AccessKey, *group, time.Since(t0).Milliseconds())
			} else {
				fail("consume", "%d/%d of the sent messages consumed within %s", got, sendOK, *deadline)
			}
			_ = c.Shutdown()
		}
	}

	// lacks-pub: the route is readable (SUB), the broker refuses the send.
	_, err = p.SendSync(ctx, primitive.NewMessage(*subOnly, []byte("must be refused")))
	want := "needs PUB on topic " + *subOnly
	switch {
	case err == nil:
		fail("lacks-pub", "send to %s succeeded", *subOnly)
	case strings.Contains(err.Error(), "CODE: 16") && strings.Contains(err.Error(), want):
		ok("lacks-pub", "send to %s refused: %s", *subOnly, oneLine(err))
	default:
		fail("lacks-pub", "expected \"CODE: 16\" and %q, got: %s", want, oneLine(err))
	}

	// no-perm-topic: the name server refuses the route (the client reports no route).
	routeRefused("no-perm-topic", p, *noPerm, "on topic "+*noPerm)
	_ = p.Shutdown()

	// unsigned
	u, err := newProducer("unsigned", nil)
	if err != nil {
		fail("unsigned", "producer did not start: %v", err)
	} else {
		routeRefused("unsigned", u, *topic, "not signed")
		_ = u.Shutdown()
	}

	if failures > 0 {
		os.Exit(1)
	}
}
