// Producer checks (grpc-java's Producers.java):
//
//	send-normal      200 sync sends; a SimpleConsumer gets each once with identical body, tag, keys, user properties
//	                 and message id
//	send-fifo        4 message groups x 50 to a FIFO topic, a FIFO SimpleConsumer group: every group complete, in
//	                 send order, with its message group
//	send-delay       delivery timestamp T + 3 s: received in [T + 3 s, T + 6 s], with that delivery timestamp
//	tx-commit, tx-rollback, tx-check-commit
//	                 commit delivered; rollback never (watched until the check-backs are over + 6 s); an open
//	                 transaction is checked back (the checker sees id and content), answered COMMIT, then delivered
package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
)

const (
	normalCount  = 200
	fifoGroups   = 4
	fifoPerGroup = 50
	delayCount   = 5
	delayMs      = 3000
	delayLateMs  = 3000
	txEach       = 3
)

func producersMain() {
	runAll(
		newScenario("send-normal", []string{"send-normal"}, sendNormal),
		newScenario("send-fifo", []string{"send-fifo"}, sendFifo),
		newScenario("send-delay", []string{"send-delay"}, sendDelay),
		newScenario("transactions", []string{"tx-commit", "tx-rollback", "tx-check-commit"}, transactions),
	)
}

func sendNormal(s *Scenario) error {
	check := "send-normal"
	topic := topicName("normal")
	r, err := newReceiver(s, groupName("normal"), topic, rmq.SUB_ALL, "*", invisible, true, 32)
	if err != nil {
		return err
	}
	defer r.close()
	p, err := newProducer(s, topic, nil)
	if err != nil {
		return err
	}
	defer stopQuietly(s, "Producer", p.GracefulStop)
	var sent []*Sent
	var order []string
	tags := []string{"TagA", "TagB", ""}
	for i := 0; i < normalCount; i++ {
		m := newSent(check, i, tags[i%len(tags)])
		if err := m.send(p, topic); err != nil {
			return failure("%v", err)
		}
		sent = append(sent, m)
		order = append(order, m.key)
	}
	s.diagc(check, fmt.Sprintf("sent %d messages in %d ms", len(sent), ms(sent[len(sent)-1].sendEnd.Sub(sent[0].sendStart))))
	receiveAll(s, check, r, topic, byKey(sent), order, timeout(60))
	s.report(check)
	return nil
}

func sendFifo(s *Scenario) error {
	check := "send-fifo"
	topic := topicName("fifo")
	r, err := newReceiver(s, groupName("fifo"), topic, rmq.SUB_ALL, "*", invisible, true, 32)
	if err != nil {
		return err
	}
	defer r.close()
	p, err := newProducer(s, topic, nil)
	if err != nil {
		return err
	}
	defer stopQuietly(s, "Producer", p.GracefulStop)
	byK := map[string]*Sent{}
	var order []string
	// Round-robin over the groups: the groups' messages interleave in the queues they share.
	for i := 0; i < fifoPerGroup; i++ {
		for g := 0; g < fifoGroups; g++ {
			m := newSent(check, g*fifoPerGroup+i, "")
			m.messageGroup = strp(fmt.Sprintf("mg_%d", g))
			m.props["p_seq"] = strconv.Itoa(i)
			if err := m.send(p, topic); err != nil {
				return failure("%v", err)
			}
			byK[m.key] = m
			order = append(order, m.key)
		}
	}
	// Per message group, the arrival order must be the send order (arrivals are taken in the order received).
	seqs := map[string][]int{}
	first := map[string]*Arrival{}
	deadline := time.Now().Add(timeout(60))
	for len(first) < len(byK) {
		a := r.poll(deadline)
		if a == nil {
			var missing []string
			for _, k := range order {
				if first[k] == nil && len(missing) < 5 {
					missing = append(missing, k)
				}
			}
			s.problem(check, fmt.Sprintf("received %d of %d messages within %d s; missing e.g. %v; %s",
				len(first), len(byK), int(timeout(60).Seconds()), missing, r.errors()))
			break
		}
		n := len(first)
		checkArrival(s, check, a, topic, byK, first)
		if len(first) > n {
			m := byK[keyOf(a.view)]
			seq, _ := strconv.Atoi(m.props["p_seq"])
			seqs[*m.messageGroup] = append(seqs[*m.messageGroup], seq)
		}
	}
	groups := make([]string, 0, len(seqs))
	for g := range seqs {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		l := seqs[g]
		for i, q := range l {
			if q != i {
				s.problem(check, fmt.Sprintf("message group %s arrived out of order: position %d holds seq %d (order %s)",
					g, i, q, abbreviate(l)))
				break
			}
		}
	}
	s.report(check)
	return nil
}

func abbreviate(l []int) string {
	if len(l) <= 20 {
		return fmt.Sprint(l)
	}
	return fmt.Sprint(l[:20]) + "..."
}

func sendDelay(s *Scenario) error {
	check := "send-delay"
	topic := topicName("delay")
	r, err := newReceiver(s, groupName("delay"), topic, rmq.SUB_ALL, "*", invisible, true, 32)
	if err != nil {
		return err
	}
	defer r.close()
	p, err := newProducer(s, topic, nil)
	if err != nil {
		return err
	}
	defer stopQuietly(s, "Producer", p.GracefulStop)
	var sent []*Sent
	var order []string
	for i := 0; i < delayCount; i++ {
		m := newSent(check, i, "TagD")
		ts := time.Now().UnixMilli() + delayMs
		m.deliveryTimestamp = &ts
		if err := m.send(p, topic); err != nil {
			return failure("%v", err)
		}
		sent = append(sent, m)
		order = append(order, m.key)
	}
	first := receiveAll(s, check, r, topic, byKey(sent), order, delayMs*time.Millisecond+timeout(30))
	var measured []string
	for _, m := range sent {
		a := first[m.key]
		if a == nil {
			continue
		}
		rel := a.at.UnixMilli() - *m.deliveryTimestamp
		measured = append(measured, fmt.Sprintf("%d ms", rel))
		if rel < 0 {
			s.problem(check, fmt.Sprintf("%s (deliveryTimestamp T+%d ms) arrived %d ms early, at T+%d ms",
				m.key, delayMs, -rel, a.at.UnixMilli()-(*m.deliveryTimestamp-delayMs)))
		} else if rel > delayLateMs {
			s.problem(check, fmt.Sprintf("%s (deliveryTimestamp T+%d ms) arrived %d ms after it was due (allowed: %d ms)",
				m.key, delayMs, rel, delayLateMs))
		}
	}
	s.diagc(check, fmt.Sprintf("arrival relative to the delivery timestamp: %v", measured))
	s.report(check)
	return nil
}

func transactions(s *Scenario) error {
	topic := topicName("tx")
	r, err := newReceiver(s, groupName("tx"), topic, rmq.SUB_ALL, "*", invisible, true, 32)
	if err != nil {
		return err
	}
	defer r.close()
	commit := map[string]*Sent{}
	rollback := map[string]*Sent{}
	unknown := map[string]*Sent{}
	var mu sync.Mutex
	byID := map[string]*Sent{}
	kindByID := map[string]string{}
	// Check-backs: message id -> when the checker was asked.
	checks := map[string][]time.Time{}
	var checkerProblems []string
	checker := &rmq.TransactionChecker{Check: func(v *rmq.MessageView) rmq.TransactionResolution {
		now := time.Now()
		id := v.GetMessageId()
		mu.Lock()
		checks[id] = append(checks[id], now)
		kind, known := kindByID[id]
		m := byID[id]
		mu.Unlock()
		s.diagc("tx-check-commit", fmt.Sprintf("check-back for %s (%s)", describe(v), kind))
		if !known {
			mu.Lock()
			checkerProblems = append(checkerProblems, "check-back for a message this producer did not send: "+describe(v))
			mu.Unlock()
			return rmq.UNKNOWN
		}
		if d := m.differences(v, topic, true); len(d) > 0 {
			mu.Lock()
			checkerProblems = append(checkerProblems, fmt.Sprintf("the checker's view of %s differs from what was sent: %s",
				m.key, strings.Join(d, "; ")))
			mu.Unlock()
		}
		if kind == "rollback" {
			return rmq.ROLLBACK
		}
		return rmq.COMMIT
	}}
	p, err := newProducer(s, topic, checker)
	if err != nil {
		return err
	}
	defer stopQuietly(s, "Producer", p.GracefulStop)

	var unknownOrder, commitOrder []*Sent
	for i := 0; i < txEach*3; i++ {
		kind := []string{"commit", "rollback", "unknown"}[i%3]
		check := map[string]string{"commit": "tx-commit", "rollback": "tx-rollback", "unknown": "tx-check-commit"}[kind]
		m := newSent(check, i, "TagT")
		tx := p.BeginTransaction()
		m.sendStart = time.Now()
		rc, err := p.SendWithTransaction(context.Background(), m.build(topic), tx)
		m.sendEnd = time.Now()
		if err != nil {
			return failure("transactional send of %s failed: %v", m.key, err)
		}
		if len(rc) != 1 {
			return failure("transactional send of %s returned %d receipts", m.key, len(rc))
		}
		m.messageID = rc[0].MessageID
		mu.Lock()
		byID[m.messageID] = m
		kindByID[m.messageID] = kind
		mu.Unlock()
		switch kind {
		case "commit":
			if err := tx.Commit(); err != nil {
				s.problem("tx-commit", fmt.Sprintf("commit of %s failed: %v", m.key, err))
			}
			commit[m.key] = m
			commitOrder = append(commitOrder, m)
		case "rollback":
			if err := tx.RollBack(); err != nil {
				s.problem("tx-rollback", fmt.Sprintf("rollback of %s failed: %v", m.key, err))
			}
			rollback[m.key] = m
		default:
			// neither committed nor rolled back: left to the check-back
			unknown[m.key] = m
			unknownOrder = append(unknownOrder, m)
		}
	}
	sentAt := time.Now()
	s.diag(fmt.Sprintf("sent %d committed, %d rolled back, %d open transactional messages",
		len(commit), len(rollback), len(unknown)))

	got := map[string]*Arrival{}
	// Wait for the committed and the checked-back messages (the check-back takes the broker's transaction timeout
	// and check interval), then watch a further 6 s for anything rolled back.
	deadline := sentAt.Add(timeout(90))
	var quietUntil time.Time
	for {
		now := time.Now()
		complete := true
		for k := range commit {
			complete = complete && got[k] != nil
		}
		for k := range unknown {
			complete = complete && got[k] != nil
		}
		if complete && quietUntil.IsZero() {
			quietUntil = now.Add(6 * time.Second)
		}
		until := deadline
		if !quietUntil.IsZero() && quietUntil.Before(until) {
			until = quietUntil
		}
		if !now.Before(until) {
			break
		}
		a := r.poll(until)
		if a == nil {
			continue
		}
		k := keyOf(a.view)
		var check string
		switch {
		case commit[k] != nil:
			check = "tx-commit"
		case rollback[k] != nil:
			check = "tx-rollback"
		case unknown[k] != nil:
			check = "tx-check-commit"
		default:
			s.problem("tx-commit", "received a message that was not sent: "+describe(a.view))
			continue
		}
		if check == "tx-rollback" {
			s.problem(check, fmt.Sprintf("rolled-back message %s was delivered %d ms after the sends (%s)",
				k, ms(a.at.Sub(sentAt)), describe(a.view)))
			continue
		}
		m := commit[k]
		if m == nil {
			m = unknown[k]
		}
		if got[k] != nil {
			mu.Lock()
			_, checked := checks[m.messageID]
			mu.Unlock()
			if check == "tx-commit" && checked {
				// The broker checked back a transaction the producer had already committed (its commit was not
				// processed yet) and the checker said COMMIT again: a duplicate at-least-once allows.
				s.diagc(check, fmt.Sprintf("note: %s delivered again after a check-back of its committed transaction (%s)",
					k, describe(a.view)))
			} else {
				s.problem(check, fmt.Sprintf("%s was delivered twice (%s)", k, describe(a.view)))
			}
			continue
		}
		got[k] = a
		if d := m.differences(a.view, topic, true); len(d) > 0 {
			s.problem(check, k+" arrived different from what was sent: "+strings.Join(d, "; "))
		}
	}
	for _, m := range commitOrder {
		if got[m.key] == nil {
			s.problem("tx-commit", fmt.Sprintf("committed message %s was not delivered within %d s",
				m.key, int(timeout(90).Seconds())))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, m := range unknownOrder {
		c := checks[m.messageID]
		a := got[m.key]
		switch {
		case len(c) == 0:
			s.problem("tx-check-commit", fmt.Sprintf("no check-back for the open transaction of %s within %d s",
				m.key, int(timeout(90).Seconds())))
		case a == nil:
			s.problem("tx-check-commit", fmt.Sprintf("%s was checked back (COMMIT) %d ms after its send but not delivered",
				m.key, ms(c[0].Sub(m.sendEnd))))
		default:
			s.diagc("tx-check-commit", fmt.Sprintf("%s: first check-back %d ms after the send (%d check-backs), delivered %d ms after it",
				m.key, ms(c[0].Sub(m.sendEnd)), len(c), ms(a.at.Sub(c[0]))))
			if a.at.Before(c[0]) {
				s.problem("tx-check-commit", m.key+" was delivered before its check-back")
			}
		}
	}
	for _, cp := range checkerProblems {
		s.problem("tx-check-commit", cp)
	}
	for id := range checks {
		if kind, ok := kindByID[id]; ok && kind != "unknown" {
			s.diag(fmt.Sprintf("note: the broker asked about a resolved (%s) transaction: %s", kind, id))
		}
	}
	s.report("tx-commit")
	s.report("tx-rollback")
	s.report("tx-check-commit")
	return nil
}
