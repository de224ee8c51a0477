// push-fifo-order (grpc-java's FifoPush.java): FIFO order per message group under concurrency. 8 message groups x
// 25 messages go to a FIFO topic from two producers at once (each sends its 4 groups round-robin, synchronously);
// two FIFO PushConsumers (a consumeMessageOrderly group; 4 consumption threads each, FIFO consume accelerator on, so
// different groups are consumed in parallel) consume them, taking 0-3 ms per message; the listeners hold the first
// messages until all are sent, so every group has a backlog when consumption starts. Every message must be consumed;
// per message group, a message is only consumed after the previous one of its group finished (never two of a group
// at once, across both consumers), first deliveries come in send order without gaps, and a message consumed again
// must carry a higher deliveryAttempt.
package main

import (
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
)

const (
	fifoPushGroups   = 8
	fifoPushPerGroup = 25
)

func fifoPushMain() {
	runAll(newScenario("push-fifo-order", []string{"push-fifo-order"}, fifoPush))
}

type fifoEvent struct {
	consumer string
	seq      int
	attempt  int
	ticket   int64
}

func fifoPush(s *Scenario) error {
	check := "push-fifo-order"
	topic := topicName("fifopush")
	group := groupName("fifopush")
	var tickets atomic.Int64
	var mu sync.Mutex
	inFlight := map[string]*atomic.Int32{}
	events := map[string][]fifoEvent{}
	byK := map[string]*Sent{}
	perConsumer := map[string]*atomic.Int32{}
	contentProblems := map[string][]string{}

	gate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	defer openGate()

	// The messages (all known before the consumers start, so the listeners can look them up).
	var all []*Sent
	for g := 0; g < fifoPushGroups; g++ {
		for i := 0; i < fifoPushPerGroup; i++ {
			m := newSent(check, g*fifoPushPerGroup+i, "TagF")
			m.messageGroup = strp(fmt.Sprintf("mg_%d", g))
			m.props["p_seq"] = strconv.Itoa(i)
			byK[m.key] = m
			all = append(all, m)
		}
	}

	var consumers []rmq.PushConsumer
	defer func() {
		var wg sync.WaitGroup
		for _, c := range consumers {
			wg.Add(1)
			go func(c rmq.PushConsumer) {
				defer wg.Done()
				stopQuietly(s, "PushConsumer", c.GracefulStop)
			}(c)
		}
		wg.Wait()
	}()
	for _, name := range []string{"c1", "c2"} {
		name := name
		perConsumer[name] = &atomic.Int32{}
		c, err := newPushConsumer(s, group, topic, true, func(v *rmq.MessageView) rmq.ConsumerResult {
			// Held until every message is sent, so that each group has a backlog to consume.
			select {
			case <-gate:
			case <-time.After(timeout(60)):
				s.problem(check, "the sends did not finish within 60 s")
			}
			mg := ps(v.GetMessageGroup())
			mu.Lock()
			n := inFlight[mg]
			if n == nil {
				n = &atomic.Int32{}
				inFlight[mg] = n
			}
			mu.Unlock()
			concurrent := n.Add(1)
			defer n.Add(-1)
			ticket := tickets.Add(1)
			k := keyOf(v)
			m := byK[k]
			if concurrent > 1 {
				s.problem(check, fmt.Sprintf("two messages of group %s consumed at once (%s got %s while another "+
					"was in progress)", mg, name, describe(v)))
			}
			if m == nil {
				s.problem(check, "consumed a message that was not sent: "+describe(v))
				return rmq.SUCCESS
			}
			d := m.differences(v, topic, true)
			seq, _ := strconv.Atoi(m.props["p_seq"])
			mu.Lock()
			if len(d) > 0 {
				contentProblems[k] = d
			}
			events[mg] = append(events[mg], fifoEvent{name, seq, int(v.GetDeliveryAttempt()), ticket})
			mu.Unlock()
			perConsumer[name].Add(1)
			time.Sleep(time.Duration(rand.Intn(4)) * time.Millisecond) // simulated work
			return rmq.SUCCESS
		})
		if err != nil {
			return err
		}
		consumers = append(consumers, c)
	}

	// Two producers, each with its own 4 groups, sending concurrently.
	var producers []rmq.Producer
	for pi := 0; pi < 2; pi++ {
		p, err := newProducer(s, topic, nil)
		if err != nil {
			for _, p := range producers {
				stopQuietly(s, "Producer", p.GracefulStop)
			}
			return err
		}
		producers = append(producers, p)
	}
	var wg sync.WaitGroup
	var sendErrMu sync.Mutex
	var sendErrors []string
	start := time.Now()
	for pi, p := range producers {
		wg.Add(1)
		go func(half int, p rmq.Producer) {
			defer wg.Done()
			defer stopQuietly(s, "Producer", p.GracefulStop)
			for i := 0; i < fifoPushPerGroup; i++ {
				for g := half * fifoPushGroups / 2; g < (half+1)*fifoPushGroups/2; g++ {
					m := all[g*fifoPushPerGroup+i]
					if err := m.send(p, topic); err != nil {
						sendErrMu.Lock()
						sendErrors = append(sendErrors, err.Error())
						sendErrMu.Unlock()
						return
					}
				}
			}
		}(pi, p)
	}
	wg.Wait()
	openGate()
	if len(sendErrors) > 0 {
		return failure("send failed: %s", sendErrors[0])
	}
	s.diagc(check, fmt.Sprintf("sent %d messages in %d ms", len(all), ms(time.Since(start))))

	counts := func() string {
		return fmt.Sprintf("{c1=%d, c2=%d}", perConsumer["c1"].Load(), perConsumer["c2"].Load())
	}
	if err := awaitCond(s, "every message consumed", timeout(60), func() bool {
		mu.Lock()
		defer mu.Unlock()
		firsts := 0
		for _, l := range events {
			seen := map[int]bool{}
			for _, e := range l {
				seen[e.seq] = true
			}
			firsts += len(seen)
		}
		return firsts == len(all)
	}, func() string { return "consumed per consumer " + counts() }); err != nil {
		s.problem(check, err.Error())
	}
	s.diagc(check, "messages consumed per consumer: "+counts())

	mu.Lock()
	defer mu.Unlock()
	keys := make([]string, 0, len(contentProblems))
	for k := range contentProblems {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s.problem(check, k+" arrived different from what was sent: "+strings.Join(contentProblems[k], "; "))
	}
	redeliveries := 0
	for g := 0; g < fifoPushGroups; g++ {
		mg := fmt.Sprintf("mg_%d", g)
		l := append([]fifoEvent(nil), events[mg]...)
		sort.Slice(l, func(i, j int) bool { return l[i].ticket < l[j].ticket })
		max := -1
		lastAttempt := map[int]int{}
		for _, ev := range l {
			if ev.seq == max+1 {
				max = ev.seq
			} else if ev.seq > max+1 {
				s.problem(check, fmt.Sprintf("group %s: seq %d consumed (by %s) before seq %d (order %s)",
					mg, ev.seq, ev.consumer, max+1, fifoOrder(l)))
				break
			} else {
				redeliveries++
				if prev, ok := lastAttempt[ev.seq]; ok && ev.attempt <= prev {
					s.problem(check, fmt.Sprintf("group %s: seq %d consumed again with deliveryAttempt %d (previously %d)",
						mg, ev.seq, ev.attempt, prev))
				}
			}
			lastAttempt[ev.seq] = ev.attempt
		}
		if max != fifoPushPerGroup-1 {
			s.problem(check, fmt.Sprintf("group %s: only seq 0..%d consumed in order (order %s)", mg, max, fifoOrder(l)))
		}
	}
	s.diagc(check, fmt.Sprintf("redeliveries: %d", redeliveries))
	s.report(check)
	return nil
}

func fifoOrder(l []fifoEvent) string {
	var b strings.Builder
	b.WriteString("[")
	for i := 0; i < len(l) && i < 30; i++ {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(strconv.Itoa(l[i].seq))
		if l[i].attempt > 1 {
			fmt.Fprintf(&b, "(a%d)", l[i].attempt)
		}
	}
	if len(l) > 30 {
		b.WriteString(" ...]")
	} else {
		b.WriteString("]")
	}
	return b.String()
}
