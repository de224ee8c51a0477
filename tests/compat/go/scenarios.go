package main

// Message-semantics scenarios for the Go client (the Java programs under ../java check the same with more cases):
//
//   g-retry-dlq     a clustering push consumer with MaxReconsumeTimes 2 answers ConsumeRetryLater for every 4th of 40
//                   messages: each must come back with ReconsumeTimes 1 and 2, after the delay of level 3 and then 4
//                   (never earlier, at most 1.5 s later), then land in %DLQ%<group>, where a consumer of another group
//                   reads it with the original body, keys, tag and properties.
//   h-delay-levels  messages with WithDelayTimeLevel(k), k = 1..6, are not delivered before send + delay(k) and
//                   arrive at most 1 s after.
//   l-broadcast     two BroadCasting consumers of one group each receive every message.
//
// Delays come from COMPAT_DELAY_LEVELS (RocketMQ's messageDelayLevel syntax; default "1s 2s ... 18s", as
// run-against-standalone.sh configures the broker).

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	rocketmq "github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

func nameservers() ([]string, error) {
	addr := strings.TrimSpace(os.Getenv("NAMESRV_ADDR"))
	if addr == "" {
		return nil, failf("NAMESRV_ADDR is not set")
	}
	return strings.Split(addr, ";"), nil
}

func newRunID() string {
	return strconv.FormatInt(time.Now().UnixMilli(), 36) + strconv.FormatInt(rand.Int63n(1<<20), 36)
}

// delayLevels returns the broker's delay levels (index 0 = level 1).
func delayLevels() ([]time.Duration, error) {
	s := strings.TrimSpace(os.Getenv("COMPAT_DELAY_LEVELS"))
	if s == "" {
		s = "1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 11s 12s 13s 14s 15s 16s 17s 18s"
	}
	var out []time.Duration
	for _, p := range strings.Fields(s) {
		unit := map[string]time.Duration{"ms": time.Millisecond, "s": time.Second, "m": time.Minute, "h": time.Hour, "d": 24 * time.Hour}
		var num string
		var mult time.Duration
		if strings.HasSuffix(p, "ms") {
			num, mult = p[:len(p)-2], unit["ms"]
		} else if len(p) > 1 {
			num, mult = p[:len(p)-1], unit[p[len(p)-1:]]
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || mult == 0 {
			return nil, failf("bad delay level %q in COMPAT_DELAY_LEVELS", p)
		}
		out = append(out, time.Duration(n)*mult)
	}
	return out, nil
}

func levelDelay(levels []time.Duration, level int) time.Duration {
	if level > len(levels) {
		level = len(levels)
	}
	return levels[level-1]
}

func firstKey(m *primitive.MessageExt) string {
	return strings.SplitN(m.GetKeys(), primitive.PropertyKeySeparator, 2)[0]
}

func ms(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

// msSince is to - from at millisecond resolution. RocketMQ timestamps (store time, due time) are whole milliseconds,
// so a broker that stores at 12.9 ms and delivers "store time + 1000 ms" at 1012.0 ms is on time although only
// 999.1 ms passed: comparing at nanosecond resolution would call that early.
func msSince(from, to time.Time) time.Duration {
	return time.Duration(to.UnixMilli()-from.UnixMilli()) * time.Millisecond
}

// problems collects check failures; all are printed, the first is the FAIL reason.
type problems struct {
	mu   sync.Mutex
	list []string
}

func (p *problems) add(format string, args ...interface{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.list = append(p.list, fmt.Sprintf(format, args...))
}

func (p *problems) err(diag *[]func() []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.list) == 0 {
		return nil
	}
	list := append([]string(nil), p.list...)
	*diag = append(*diag, func() []string {
		out := make([]string, 0, len(list))
		for i, s := range list {
			if i == 40 {
				out = append(out, fmt.Sprintf("problem: ... %d more", len(list)-40))
				break
			}
			out = append(out, "problem: "+s)
		}
		return out
	})
	if len(list) > 1 {
		return failf("%s (and %d more problems)", list[0], len(list)-1)
	}
	return failf("%s", list[0])
}

func newAdmin(ns []string) (admin.Admin, error) {
	a, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(ns)))
	if err != nil {
		return nil, failf("NewAdmin: %v", err)
	}
	return a, nil
}

func hasRoute(a admin.Admin, topic string) bool {
	mqs, err := a.FetchPublishMessageQueues(context.Background(), topic)
	return err == nil && len(mqs) > 0
}

func startProducer(ns []string, group, instance string) (rocketmq.Producer, error) {
	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver(ns)),
		producer.WithGroupName(group),
		producer.WithInstanceName(instance),
		producer.WithSendMsgTimeout(10*time.Second),
		producer.WithRetry(2),
	)
	if err != nil {
		return nil, failf("NewProducer: %v", err)
	}
	if err := p.Start(); err != nil {
		return nil, failf("producer Start: %v", err)
	}
	return p, nil
}

// sendSync sends m (made from e) and records the send with every collector in cols.
func sendSync(p rocketmq.Producer, topic string, e *expected, m *primitive.Message, cols ...*collector) error {
	r, err := p.SendSync(context.Background(), m)
	if err != nil {
		return failf("SendSync %s: %v", e.key, err)
	}
	if r.Status != primitive.SendOK {
		return failf("SendSync %s: status %v", e.key, r.Status)
	}
	for _, col := range cols {
		col.sent(e, m, fmt.Sprintf("sync queue=%d offset=%d msgId=%s", r.MessageQueue.QueueId, r.QueueOffset, r.MsgID))
	}
	return nil
}

type listener func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error)

func startConsumer(ns []string, group, instance, topic string, f listener, opts ...consumer.Option) (rocketmq.PushConsumer, error) {
	return startConsumerWith(ns, group, instance, topic, consumer.MessageSelector{}, f, opts...)
}

// startConsumerWith is startConsumer with a subscription expression (tags).
func startConsumerWith(ns []string, group, instance, topic string, sel consumer.MessageSelector, f listener, opts ...consumer.Option) (rocketmq.PushConsumer, error) {
	all := append([]consumer.Option{
		consumer.WithNsResolver(primitive.NewPassthroughResolver(ns)),
		consumer.WithGroupName(group),
		consumer.WithInstance(instance),
		consumer.WithConsumerModel(consumer.Clustering),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	}, opts...)
	c, err := rocketmq.NewPushConsumer(all...)
	if err != nil {
		return nil, failf("NewPushConsumer(%s): %v", instance, err)
	}
	if err := c.Subscribe(topic, sel, f); err != nil {
		return nil, failf("Subscribe(%s): %v", topic, err)
	}
	if err := c.Start(); err != nil {
		return nil, failf("consumer %s Start: %v", instance, err)
	}
	return c, nil
}

// ---------------------------------------------------------------------------------------------------------------
// g-retry-dlq

type delivery struct {
	reconsumeTimes int32
	at             time.Time
	returned       time.Time
	topic          string
	diff           string
	where          string
}

func (d *delivery) String() string {
	s := fmt.Sprintf("reconsumeTimes=%d at=%s topic=%s %s", d.reconsumeTimes, d.at.Format("15:04:05.000"), d.topic, d.where)
	if !d.returned.IsZero() {
		s += " returned=" + d.returned.Format("15:04:05.000")
	}
	if d.diff != "" {
		s += " DIFF " + d.diff
	}
	return s
}

func runRetryDLQ(topic string, diag *[]func() []string) error {
	const total = 40
	const maxReconsume = 2
	const late = 1500 * time.Millisecond
	failing := func(i int) bool { return i%4 == 1 }

	ns, err := nameservers()
	if err != nil {
		return err
	}
	if topic == "" {
		return failf("-topic is required (an existing topic with 4 queues)")
	}
	levels, err := delayLevels()
	if err != nil {
		return err
	}
	runID := newRunID()
	group := "compat_g_go_g_" + runID
	retryTopic := "%RETRY%" + group
	dlqTopic := "%DLQ%" + group
	dlqGroup := "compat_g_go_gdlq_" + runID
	*diag = append(*diag, func() []string {
		return []string{"topic=" + topic + " group=" + group + " dlq group=" + dlqGroup,
			fmt.Sprintf("expected retry delays: level 3 = %s, level 4 = %s", levelDelay(levels, 3), levelDelay(levels, 4))}
	})
	var probs problems

	adm, err := newAdmin(ns)
	if err != nil {
		return err
	}
	defer adm.Close()

	msgs := make([]*expected, total)
	byKey := map[string]*expected{}
	var failingMsgs []*expected
	for i := range msgs {
		msgs[i] = newExpected(runID, i)
		byKey[msgs[i].key] = msgs[i]
		if failing(i) {
			failingMsgs = append(failingMsgs, msgs[i])
		}
	}
	var mu sync.Mutex
	deliveries := map[string][]*delivery{}
	var unexpected []string
	*diag = append(*diag, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := []string{"deliveries of failing messages:"}
		for _, e := range failingMsgs {
			out = append(out, "  "+e.key+" ["+e.sendInfo+"]")
			for _, d := range deliveries[e.key] {
				out = append(out, "    "+d.String())
			}
		}
		return append(out, fmt.Sprintf("unexpected deliveries to the main group: %v", unexpected))
	})

	// The Go consumer learns routes on Start and every 30 s. Apache RocketMQ creates %RETRY%<group> on the
	// group's first heartbeat: a short-lived first consumer makes the broker create it, so that the real consumer
	// knows the retry topic's route from its start.
	primer, err := startConsumer(ns, group, "prime-"+runID, topic,
		func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			return consumer.ConsumeRetryLater, nil // nothing has been sent yet
		})
	if err != nil {
		return err
	}
	if err := await(retryTopic+" to have a route (created on the consumer's heartbeat)", 5*time.Second,
		func() bool { return hasRoute(adm, retryTopic) }, func() string { return "none yet" }); err != nil {
		probs.add("no route for %s within 5 s of the first consumer's start (Apache RocketMQ creates the retry "+
			"topic on the group's first HEART_BEAT; clients learn it only at their next 30 s route poll otherwise)", retryTopic)
	}
	primer.Shutdown()

	c, err := startConsumer(ns, group, "c-"+runID, topic,
		func(ctx context.Context, batch ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			now := time.Now()
			later := false
			var mine []*delivery
			mu.Lock()
			for _, m := range batch {
				e, ok := byKey[firstKey(m)]
				if !ok {
					unexpected = append(unexpected, fmt.Sprintf("keys=%q topic=%s msgId=%s", m.GetKeys(), m.Topic, m.MsgId))
					continue
				}
				d := &delivery{reconsumeTimes: m.ReconsumeTimes, at: now, topic: m.Topic, diff: e.compare(topic, m),
					where: fmt.Sprintf("queue=%d offset=%d storeTs=%d msgId=%s RETRY_TOPIC=%s", m.Queue.QueueId,
						m.QueueOffset, m.StoreTimestamp, m.MsgId, m.GetProperty(primitive.PropertyRetryTopic))}
				deliveries[e.key] = append(deliveries[e.key], d)
				if failing(e.index) {
					later = true
					mine = append(mine, d)
				}
			}
			ret := time.Now()
			for _, d := range mine {
				d.returned = ret
			}
			mu.Unlock()
			if later {
				return consumer.ConsumeRetryLater, nil
			}
			return consumer.ConsumeSuccess, nil
		},
		consumer.WithMaxReconsumeTimes(maxReconsume),
		consumer.WithConsumeMessageBatchMaxSize(1))
	if err != nil {
		return err
	}
	defer c.Shutdown()

	p, err := startProducer(ns, group+"_p", "p-"+runID)
	if err != nil {
		return err
	}
	defer p.Shutdown()
	for _, e := range msgs {
		m := e.message(topic)
		r, err := p.SendSync(context.Background(), m)
		if err != nil {
			return failf("SendSync %s: %v", e.key, err)
		}
		if r.Status != primitive.SendOK {
			return failf("SendSync %s: status %v", e.key, r.Status)
		}
		mu.Lock()
		e.uniqID = m.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex)
		e.sendInfo = fmt.Sprintf("queue=%d offset=%d msgId=%s", r.MessageQueue.QueueId, r.QueueOffset, r.MsgID)
		mu.Unlock()
	}

	want := func(e *expected) int {
		if failing(e.index) {
			return maxReconsume + 1
		}
		return 1
	}
	if err := await("every message, and every failing message 3 times",
		timeout(30)+levelDelay(levels, 3)+levelDelay(levels, 4), func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, e := range msgs {
				if len(deliveries[e.key]) < want(e) {
					return false
				}
			}
			return true
		}, func() string {
			mu.Lock()
			defer mu.Unlock()
			done, retries := 0, 0
			for _, e := range msgs {
				if len(deliveries[e.key]) >= want(e) {
					done++
				}
				if failing(e.index) && len(deliveries[e.key]) > 1 {
					retries += len(deliveries[e.key]) - 1
				}
			}
			return fmt.Sprintf("%d/%d complete, %d redeliveries of failing messages", done, total, retries)
		}); err != nil {
		probs.err(diag)
		return err
	}

	// The dead-letter queue, read by another group.
	if err := await("a route for "+dlqTopic, timeout(30), func() bool { return hasRoute(adm, dlqTopic) },
		func() string { return "none (a write-only DLQ topic has no publish route either)" }); err != nil {
		probs.err(diag)
		return err
	}
	dlq := newCollector(failingMsgs)
	*diag = append(*diag, func() []string {
		return append([]string{"DLQ consumer:"}, dlq.report()...)
	})
	var firstProps string
	var propsOnce sync.Once
	dc, err := startConsumer(ns, dlqGroup, "d-"+runID, dlqTopic,
		func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			for _, m := range ms {
				propsOnce.Do(func() { firstProps = fmt.Sprintf("reconsumeTimes=%d %v", m.ReconsumeTimes, m.GetProperties()) })
				dlq.accept(dlqTopic, m)
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		return err
	}
	defer dc.Shutdown()
	*diag = append(*diag, func() []string { return []string{"properties of the first DLQ message: " + firstProps} })
	if err := await("every failing message in "+dlqTopic, timeout(60), dlq.complete, dlq.progress); err != nil {
		probs.err(diag)
		return err
	}
	dlq.mu.Lock()
	if dlq.nProblems > 0 {
		probs.add("dead-letter queue: %d messages differ from what was sent, e.g. %s", dlq.nProblems, dlq.problems[0])
	}
	if dlq.nUnexp > 0 {
		probs.add("dead-letter queue: %d unexpected messages, e.g. %s", dlq.nUnexp, dlq.unexpected[0])
	}
	dlq.mu.Unlock()

	// No fourth delivery: it would come level 5 after the third.
	mu.Lock()
	var lastReturn time.Time
	for _, e := range failingMsgs {
		for _, d := range deliveries[e.key] {
			if d.returned.After(lastReturn) {
				lastReturn = d.returned
			}
		}
	}
	mu.Unlock()
	quietUntil := lastReturn.Add(levelDelay(levels, 5) + late)
	for time.Now().Before(quietUntil) {
		mu.Lock()
		extra := false
		for _, e := range failingMsgs {
			if len(deliveries[e.key]) > maxReconsume+1 {
				extra = true
			}
		}
		mu.Unlock()
		if extra {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	mu.Lock()
	var delays []string
	for _, e := range msgs {
		ds := deliveries[e.key]
		for _, d := range ds {
			if d.diff != "" {
				probs.add("delivery %d differs from what was sent: %s", d.reconsumeTimes, d.diff)
			}
		}
		if !failing(e.index) {
			for _, d := range ds {
				if d.reconsumeTimes != 0 {
					probs.add("%s (consumed successfully) delivered with reconsumeTimes %d", e.key, d.reconsumeTimes)
				}
			}
			continue
		}
		var rts []string
		for _, d := range ds {
			rts = append(rts, strconv.Itoa(int(d.reconsumeTimes)))
		}
		if strings.Join(rts, ",") != "0,1,2" {
			probs.add("%s: reconsumeTimes of its deliveries were [%s], expected [0,1,2] (then the DLQ)", e.key, strings.Join(rts, ","))
			continue
		}
		line := e.key + ":"
		for i := 1; i < len(ds); i++ {
			lvl := 3 + int(ds[i-1].reconsumeTimes)
			want := levelDelay(levels, lvl)
			// Millisecond resolution, like the broker's timestamps (see msSince).
			got := msSince(ds[i-1].returned, ds[i].at)
			line += fmt.Sprintf(" retry %d after %s (level %d = %s)", i, ms(got), lvl, ms(want))
			if got < want {
				probs.add("%s: retry %d delivered %s after ConsumeRetryLater, before its delay of %s", e.key, i, ms(got), ms(want))
			} else if got > want+late {
				probs.add("%s: retry %d delivered %s after ConsumeRetryLater, more than %s after its delay of %s", e.key, i, ms(got), ms(late), ms(want))
			}
			if ds[i].topic != topic {
				probs.add("%s: retry %d was delivered with topic %s (the client restores the original topic from RETRY_TOPIC)", e.key, i, ds[i].topic)
			}
		}
		delays = append(delays, line)
	}
	if len(unexpected) > 0 {
		probs.add("%d unexpected deliveries to the main group, e.g. %s", len(unexpected), unexpected[0])
	}
	mu.Unlock()
	*diag = append(*diag, func() []string { return append([]string{"retry delays:"}, delays...) })
	if len(delays) > 0 {
		fmt.Fprintf(os.Stderr, "  .. retry delays: %s\n", delays[0])
	}
	return probs.err(diag)
}

// ---------------------------------------------------------------------------------------------------------------
// h-delay-levels

func runDelayLevels(topic string, diag *[]func() []string) error {
	order := []int{6, 1, 4, 2, 5, 3}
	const perLevel = 3
	const warmups = 8
	const late = time.Second

	ns, err := nameservers()
	if err != nil {
		return err
	}
	if topic == "" {
		return failf("-topic is required (an existing topic)")
	}
	levels, err := delayLevels()
	if err != nil {
		return err
	}
	runID := newRunID()
	group := "compat_g_go_h_" + runID
	*diag = append(*diag, func() []string { return []string{"topic=" + topic + " group=" + group} })
	var probs problems

	n := warmups + perLevel*len(order)
	msgs := make([]*expected, n)
	for i := range msgs {
		msgs[i] = newExpected(runID, i)
	}
	col := newCollector(msgs)
	*diag = append(*diag, col.report)
	var mu sync.Mutex
	arrivals := map[string][]time.Time{}
	info := map[string]string{}
	c, err := startConsumer(ns, group, "c-"+runID, topic,
		func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			now := time.Now()
			for _, m := range ms {
				k := firstKey(m)
				mu.Lock()
				arrivals[k] = append(arrivals[k], now)
				if _, ok := info[k]; !ok {
					info[k] = fmt.Sprintf("storeTs=%d bornTs=%d queue=%d offset=%d DELAY=%s", m.StoreTimestamp,
						m.BornTimestamp, m.Queue.QueueId, m.QueueOffset, m.GetProperty(primitive.PropertyDelayTimeLevel))
				}
				mu.Unlock()
				col.accept(topic, m)
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		return err
	}
	defer c.Shutdown()
	p, err := startProducer(ns, group+"_p", "p-"+runID)
	if err != nil {
		return err
	}
	defer p.Shutdown()

	// Level-0 warm-up messages (spread over the queues) show that the consumer is polling every queue.
	for _, e := range msgs[:warmups] {
		if err := sendSync(p, topic, e, e.message(topic), col); err != nil {
			return err
		}
	}
	if err := await("the level-0 warm-up messages", timeout(60), func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range msgs[:warmups] {
			if len(arrivals[e.key]) == 0 {
				return false
			}
		}
		return true
	}, col.progress); err != nil {
		return err
	}

	type sentMsg struct {
		e          *expected
		level      int
		start, end time.Time
	}
	var sent []sentMsg
	i := warmups
	for rep := 0; rep < perLevel; rep++ {
		for _, level := range order {
			e := msgs[i]
			i++
			m := e.message(topic)
			m.WithDelayTimeLevel(level)
			start := time.Now()
			if err := sendSync(p, topic, e, m, col); err != nil {
				return err
			}
			sent = append(sent, sentMsg{e: e, level: level, start: start, end: time.Now()})
		}
	}
	maxDelay := time.Duration(0)
	for _, l := range order {
		if d := levelDelay(levels, l); d > maxDelay {
			maxDelay = d
		}
	}
	if err := await("every delayed message", maxDelay+timeout(30), col.complete, col.progress); err != nil {
		return err
	}
	perLvl := map[int][]string{}
	mu.Lock()
	for _, s := range sent {
		d := levelDelay(levels, s.level)
		at := arrivals[s.e.key]
		first := at[0]
		for _, t := range at {
			if t.Before(first) {
				first = t
			}
			if msSince(s.start, t) < d {
				probs.add("%s (level %d = %s) delivered %s after its send started: early (%s)", s.e.key, s.level, ms(d),
					ms(msSince(s.start, t)), info[s.e.key])
			}
		}
		perLvl[s.level] = append(perLvl[s.level], ms(msSince(s.end, first)))
		if msSince(s.end, first) > d+late {
			probs.add("%s (level %d = %s) first delivered %s after its send returned: more than %s late (%s)", s.e.key,
				s.level, ms(d), ms(msSince(s.end, first)), ms(late), info[s.e.key])
		}
	}
	mu.Unlock()
	var lv []int
	for l := range perLvl {
		lv = append(lv, l)
	}
	sort.Ints(lv)
	var summary []string
	for _, l := range lv {
		summary = append(summary, fmt.Sprintf("%d=%v", l, perLvl[l]))
	}
	fmt.Fprintf(os.Stderr, "  .. arrival after send returned, per level: %s\n", strings.Join(summary, " "))
	*diag = append(*diag, func() []string { return []string{"arrival after send returned, per level: " + strings.Join(summary, " ")} })
	col.mu.Lock()
	if col.nProblems > 0 {
		probs.add("%d received messages differ from what was sent, e.g. %s", col.nProblems, col.problems[0])
	}
	if col.nUnexp > 0 {
		probs.add("%d unexpected messages received, e.g. %s", col.nUnexp, col.unexpected[0])
	}
	col.mu.Unlock()
	return probs.err(diag)
}

// ---------------------------------------------------------------------------------------------------------------
// l-broadcast

func runBroadcast(total int, topic string, diag *[]func() []string) error {
	ns, err := nameservers()
	if err != nil {
		return err
	}
	if topic == "" {
		return failf("-topic is required (an existing topic)")
	}
	runID := newRunID()
	group := "compat_g_go_l_" + runID
	*diag = append(*diag, func() []string {
		return []string{"topic=" + topic + " group=" + group + " local offsets in " +
			os.Getenv("rocketmq.client.localOffsetStoreDir")}
	})
	msgs := make([]*expected, total)
	for i := range msgs {
		msgs[i] = newExpected(runID, i)
	}
	one := newCollector(msgs)
	two := newCollector(msgs)
	*diag = append(*diag, func() []string { return append([]string{"consumer 1:"}, one.report()...) })
	*diag = append(*diag, func() []string { return append([]string{"consumer 2:"}, two.report()...) })
	for i, col := range []*collector{one, two} {
		col := col
		c, err := startConsumer(ns, group, fmt.Sprintf("b%d-%s", i+1, runID), topic,
			func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
				for _, m := range ms {
					col.accept(topic, m)
				}
				return consumer.ConsumeSuccess, nil
			}, consumer.WithConsumerModel(consumer.BroadCasting))
		if err != nil {
			return err
		}
		defer c.Shutdown()
	}
	p, err := startProducer(ns, group+"_p", "p-"+runID)
	if err != nil {
		return err
	}
	defer p.Shutdown()
	for _, e := range msgs {
		m := e.message(topic)
		r, err := p.SendSync(context.Background(), m)
		if err != nil {
			return failf("SendSync %s: %v", e.key, err)
		}
		if r.Status != primitive.SendOK {
			return failf("SendSync %s: status %v", e.key, r.Status)
		}
		one.sent(e, m, fmt.Sprintf("sync queue=%d offset=%d msgId=%s", r.MessageQueue.QueueId, r.QueueOffset, r.MsgID))
		two.sent(e, m, fmt.Sprintf("sync queue=%d offset=%d msgId=%s", r.MessageQueue.QueueId, r.QueueOffset, r.MsgID))
	}
	if err := await("both broadcasting consumers to receive every message", timeout(120),
		func() bool { return one.complete() && two.complete() },
		func() string { return "consumer 1 " + one.progress() + "; consumer 2 " + two.progress() }); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "  .. consumer 1: %s; consumer 2: %s\n", one.progress(), two.progress())
	var probs problems
	for i, col := range []*collector{one, two} {
		col.mu.Lock()
		if col.nProblems > 0 {
			probs.add("consumer %d: %d received messages differ from what was sent, e.g. %s", i+1, col.nProblems, col.problems[0])
		}
		if col.nUnexp > 0 {
			probs.add("consumer %d: %d unexpected messages received, e.g. %s", i+1, col.nUnexp, col.unexpected[0])
		}
		col.mu.Unlock()
	}
	return probs.err(diag)
}

// ---------------------------------------------------------------------------------------------------------------
// e-tag-filter: three push consumers of one topic, each in its own group, subscribe with
// "TagA || TagB", "TagA" and "*"; each must receive every message its expression selects (the
// messages cycle through TagA, TagB, TagC) and nothing else.

func runTagFilter(total int, topic string, diag *[]func() []string) error {
	ns, err := nameservers()
	if err != nil {
		return err
	}
	if topic == "" {
		return failf("-topic is required (an existing topic)")
	}
	runID := newRunID()
	msgs := make([]*expected, total)
	for i := range msgs {
		msgs[i] = newExpected(runID, i)
	}
	subs := []struct {
		name, expr string
		want       map[string]bool
	}{
		{"ab", "TagA || TagB", map[string]bool{"TagA": true, "TagB": true}},
		{"a", "TagA", map[string]bool{"TagA": true}},
		{"all", "*", nil},
	}
	cols := make([]*collector, len(subs))
	for i, sub := range subs {
		var selected []*expected
		for _, e := range msgs {
			if sub.want == nil || sub.want[e.tag] {
				selected = append(selected, e)
			}
		}
		col := newCollector(selected)
		cols[i] = col
		name := sub.name
		*diag = append(*diag, func() []string { return append([]string{"consumer " + name + ":"}, col.report()...) })
		group := "compat_g_go_e_" + sub.name + "_" + runID
		c, err := startConsumerWith(ns, group, "e-"+sub.name+"-"+runID, topic,
			consumer.MessageSelector{Type: consumer.TAG, Expression: sub.expr},
			func(ctx context.Context, ms ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
				for _, m := range ms {
					col.accept(topic, m)
				}
				return consumer.ConsumeSuccess, nil
			})
		if err != nil {
			return err
		}
		defer c.Shutdown()
	}
	p, err := startProducer(ns, "compat_g_go_e_p_"+runID, "p-"+runID)
	if err != nil {
		return err
	}
	defer p.Shutdown()
	for _, e := range msgs {
		if err := sendSync(p, topic, e, e.message(topic), cols...); err != nil {
			return err
		}
	}
	done := func() bool {
		for _, c := range cols {
			if !c.complete() {
				return false
			}
		}
		return true
	}
	progress := func() string {
		var parts []string
		for i, c := range cols {
			parts = append(parts, subs[i].name+" "+c.progress())
		}
		return strings.Join(parts, "; ")
	}
	if err := await("every tag subscription to receive its messages", timeout(120), done, progress); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "  .. %s\n", progress())
	var probs problems
	for i, col := range cols {
		col.mu.Lock()
		if col.nProblems > 0 {
			probs.add("consumer %s: %d received messages differ from what was sent, e.g. %s", subs[i].name, col.nProblems, col.problems[0])
		}
		if col.nUnexp > 0 {
			probs.add("consumer %s (%q): %d messages it did not subscribe to, e.g. %s", subs[i].name, subs[i].expr, col.nUnexp, col.unexpected[0])
		}
		col.mu.Unlock()
	}
	return probs.err(diag)
}
