package http

import (
	"bytes"
	"cmp"
	"crypto/hmac"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The HTML pages: the operator list, a case with its timeline, an audit
// finding, the login and error pages.

// opsBase is what every page's layout needs.
type opsBase struct {
	Title    string
	Operator string // signed-in operator; empty for bearer clients
	CSRF     string // token for the session's forms
}

func (o *Ops) base(title string, who opsWho) opsBase {
	b := opsBase{Title: title, Operator: who.Operator}
	if who.session != "" {
		b.CSRF = o.csrfToken(who.session)
	}
	return b
}

// render writes a page: headers that forbid framing, caching and any
// outside resource, then the template executed into a buffer first, so a
// template error becomes a clean 500.
func (o *Ops) render(w http.ResponseWriter, status int, page string, data any) {
	var buf bytes.Buffer
	if err := o.pages[page].ExecuteTemplate(&buf, "layout", data); err != nil {
		o.log.Error("ops: render page", "page", page, "err", err)
		http.Error(w, "internal error rendering the page", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy",
		"default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

type opsLoginData struct {
	opsBase
	Message string
	Next    string
	Name    string
	Form    string // the login form token
}

func (o *Ops) renderLogin(w http.ResponseWriter, r *http.Request, status int, msg, next, name string) {
	nonce := o.loginNonce(w, r)
	o.render(w, status, "login", opsLoginData{
		opsBase: opsBase{Title: "Sign in"}, Message: msg, Next: opsNext(next), Name: name, Form: o.loginToken(nonce),
	})
}

type opsErrorData struct {
	opsBase
	Heading string
	Message string
	Back    string
}

func (o *Ops) renderError(w http.ResponseWriter, r *http.Request, who opsWho, status int, heading, msg string) {
	back := "/ops"
	if id := r.PathValue("id"); id != "" {
		back = "/ops/purchases/" + url.PathEscape(id)
	} else if fid := r.PathValue("fid"); fid != "" && r.Method != http.MethodGet {
		back = "/ops/findings/" + url.PathEscape(fid)
	}
	o.render(w, status, "error", opsErrorData{opsBase: o.base(heading, who), Heading: heading, Message: msg, Back: back})
}

// cannotShow answers a page, or its JSON, that cannot be shown because
// of an error of kind k: a JSON error with jsonMsg for script clients,
// else the error page; the status is k's.
func (o *Ops) cannotShow(w http.ResponseWriter, r *http.Request, who opsWho, asJSON bool, k reconcile.Kind, jsonMsg, heading, pageMsg string) {
	if asJSON {
		writeKindError(w, k, jsonMsg)
		return
	}
	o.renderError(w, r, who, statusOf(k), heading, pageMsg)
}

type opsRow struct {
	ID, PaymentID, Amount, Customer, Reference, Age, Reason, State string
	Account                                                        string // "platform" or acct_…
	EscalatedAt                                                    time.Time
}

type opsListData struct {
	opsBase
	// Account is the account filter, "" for every account.
	Account string
	Rows    []opsRow
	// Refunds are the escalated refunds, oldest escalation first.
	Refunds     []opsRefundRow
	Findings    []opsFindingRow
	MoneyAtRisk []string
	Now         time.Time
	// Inbox is the webhook inbox's backlog and its failed events.
	Inbox opsInbox
	// Disputes are the open disputes, soonest evidence due first.
	Disputes []opsDisputeRow
	Flash    *opsFlash
}

// opsInbox is what waits in the webhook inbox, as the list page shows it.
type opsInbox struct {
	Pending  int
	Retrying int    // of the pending, those due again after a failure
	Oldest   string // the oldest pending event's age; "" if none
	Failed   int
	Events   []opsFailedEvent // the most recent failed ones
}

// opsFailedEvent is an event the applier gave up on.
type opsFailedEvent struct {
	Provider, ID, Type, Purchase, Error string
	Attempts                            int
	FailedAt                            time.Time
}

// opsFindingRow is an audit finding as the pages show it.
type opsFindingRow struct {
	ID                                 int64
	Kind, PaymentID, PurchaseID        string
	Account                            string // its purchase's; "" without one
	Amount, Status, Evidence, Provider string
	FoundAt                            time.Time
	Open                               bool
	ClosedAt                           time.Time
	ClosedBy, CloseNote                string
}

func opsFindingRows(fs []reconcile.Finding) []opsFindingRow {
	out := make([]opsFindingRow, 0, len(fs))
	for _, f := range fs {
		out = append(out, opsFindingRow{
			ID: f.ID, Kind: string(f.Kind), PaymentID: f.PaymentID, PurchaseID: f.PurchaseID, Account: f.AccountLabel(),
			Amount: provider.FormatAmount(f.Amount, f.Currency), Status: f.Status, Evidence: f.Evidence, Provider: f.Provider,
			FoundAt: f.FoundAt, Open: f.Open(), ClosedAt: f.ClosedAt, ClosedBy: f.ClosedBy, CloseNote: f.CloseNote,
		})
	}
	return out
}

// listPage shows the operator list: the escalated cases and refunds, the
// open findings and disputes, of the account ?account= selects (see
// opsAccount), and the webhook inbox, whole.
func (o *Ops) listPage(w http.ResponseWriter, r *http.Request, who opsWho) {
	account, ok := o.opsAccount(w, r, who, false)
	if !ok {
		return
	}
	cases, err := o.svc.Escalations(r.Context(), account)
	if err != nil {
		o.log.Error("ops: list escalations", "err", err)
		o.renderError(w, r, who, statusOf(reconcile.KindInternal), "Could not read the cases", "The escalated cases could not be read from the database. Reload to try again.")
		return
	}
	refunds, err := o.svc.EscalatedRefunds(r.Context(), account)
	if err != nil {
		o.log.Error("ops: list escalated refunds", "err", err)
		o.renderError(w, r, who, statusOf(reconcile.KindInternal), "Could not read the refunds", "The escalated refunds could not be read from the database. Reload to try again.")
		return
	}
	findings, err := o.svc.Findings(r.Context(), account, false)
	if err != nil {
		o.log.Error("ops: list findings", "err", err)
		o.renderError(w, r, who, statusOf(reconcile.KindInternal), "Could not read the findings", "The audit findings could not be read from the database. Reload to try again.")
		return
	}
	failed, backlog, err := o.svc.FailedEvents(r.Context(), opsFailedEventsShown)
	if err != nil {
		o.log.Error("ops: read the webhook inbox", "err", err)
		o.renderError(w, r, who, statusOf(reconcile.KindInternal), "Could not read the webhook inbox", "The webhook inbox could not be read from the database. Reload to try again.")
		return
	}
	disputes, now, err := o.svc.OpenDisputes(r.Context(), account)
	if err != nil {
		o.log.Error("ops: list open disputes", "err", err)
		o.renderError(w, r, who, statusOf(reconcile.KindInternal), "Could not read the disputes", "The open disputes could not be read from the database. Reload to try again.")
		return
	}
	data := opsListData{
		opsBase: o.base("Operator list", who), Account: string(account), Now: o.cfg.Now().UTC(),
		Findings: opsFindingRows(findings), MoneyAtRisk: opsMoneyAtRisk(findings, disputes),
		Inbox: opsInbox{Pending: backlog.Pending, Retrying: backlog.Retrying, Failed: backlog.Failed},
	}
	for _, d := range disputes {
		data.Disputes = append(data.Disputes, opsDisputeRowOf(d, now))
	}
	if msg := r.URL.Query().Get("flash"); msg != "" && hmac.Equal([]byte(r.URL.Query().Get("fs")), []byte(o.flashSig("list", msg))) {
		data.Flash = &opsFlash{Text: msg}
	}
	if !backlog.Oldest.IsZero() {
		data.Inbox.Oldest = opsAge(o.cfg.Now().Sub(backlog.Oldest))
	}
	for _, e := range failed {
		data.Inbox.Events = append(data.Inbox.Events, opsFailedEvent{
			Provider: e.Provider, ID: e.EventID, Type: e.Type, Purchase: e.PurchaseID, Error: e.LastError,
			Attempts: e.Attempts, FailedAt: e.ProcessedAt,
		})
	}
	for _, c := range cases {
		p := c.Purchase
		data.Rows = append(data.Rows, opsRow{
			ID: p.ID, PaymentID: p.ProviderPaymentID, Amount: provider.FormatAmount(p.Amount, p.Currency), Customer: p.Customer,
			Reference: p.Reference, Age: opsAge(c.Age), Reason: string(p.EscalationReason), State: string(p.State),
			Account: reconcile.AccountLabel(p.Account), EscalatedAt: p.EscalatedAt,
		})
	}
	for _, c := range refunds {
		data.Refunds = append(data.Refunds, opsRefundRowOf(c.Refund, c.Age))
	}
	o.render(w, http.StatusOK, "list", data)
}

// opsFailedEventsShown caps the failed webhook events the list page
// shows.
const opsFailedEventsShown = 50

// retryEvent puts a failed webhook event back in the inbox, pending, for
// the applier.
func (o *Ops) retryEvent(w http.ResponseWriter, r *http.Request, who opsWho) {
	id := r.PathValue("eid")
	prov := cmp.Or(r.PostForm.Get("provider"), "stripe")
	if err := o.svc.RetryFailedEvent(r.Context(), prov, id, who.Operator); err != nil {
		o.refuseAction(w, r, who, err, "retry", "event", id)
		return
	}
	o.log.Info("ops: retried a failed webhook event", "event", id, "operator", who.Operator)
	msg := fmt.Sprintf("Event %s is pending again; the applier applies it next.", id)
	if opsWantsJSON(r) {
		writeJSON(w, http.StatusOK, map[string]any{"message": msg, "event": id})
		return
	}
	q := url.Values{"flash": {msg}, "fs": {o.flashSig("list", msg)}}
	http.Redirect(w, r, "/ops?"+q.Encode(), http.StatusSeeOther)
}

// opsEntry is one line of a case's timeline.
type opsEntry struct {
	At     time.Time
	Kind   string // transition, provider, webhook, operator
	Title  string
	Detail string
	Actor  string
	State  string // for transitions: the target state, for its badge
}

func opsTimeline(c reconcile.Case) []opsEntry {
	var out []opsEntry
	for _, a := range c.Attempts {
		title := fmt.Sprintf("%s → %s", a.Op, a.Outcome)
		var d []string
		if a.Status != "" {
			d = append(d, "status "+a.Status)
		}
		if a.PaymentID != "" {
			d = append(d, "payment "+a.PaymentID)
		}
		if a.Key != "" {
			d = append(d, "key "+a.Key)
		}
		if a.Error != "" {
			d = append(d, "error: "+a.Error)
		}
		if a.Note != "" {
			d = append(d, a.Note)
		}
		switch {
		case a.Derived:
			d = append(d, "sent, no answer recorded")
		case !a.Applied:
			d = append(d, "answer not applied")
		}
		d = append(d, fmt.Sprintf("%.1f ms", float64(a.Latency.Microseconds())/1000))
		out = append(out, opsEntry{At: a.At, Kind: "provider", Title: title, Detail: strings.Join(d, " · "), Actor: a.Actor})
	}
	for _, e := range c.Events {
		d := "outcome " + e.OutcomeText()
		if e.ObjectID != "" {
			d += " · payment " + e.ObjectID
		}
		if e.Result != "" {
			d += " · reports " + string(e.Result)
		}
		out = append(out, opsEntry{At: e.ReceivedAt, Kind: "webhook", Title: e.Provider + " " + e.Type + " (" + e.EventID + ")", Detail: d, Actor: e.Provider})
	}
	for _, t := range c.Transitions {
		out = append(out, opsEntry{
			At: t.At, Kind: "transition", Title: string(t.From) + " → " + string(t.To) + " (" + string(t.Cause) + ")",
			Detail: t.Evidence, Actor: t.Actor, State: string(t.To),
		})
	}
	for _, a := range c.Actions {
		d := a.Did
		if a.Evidence != "" {
			d += " · " + a.Evidence
		}
		if a.Saw != "" {
			d += " · provider showed: " + a.Saw
		}
		out = append(out, opsEntry{At: a.At, Kind: "operator", Title: a.Action + " by " + a.Operator, Detail: d, Actor: a.Operator})
	}
	// Entries at the same instant (a coarse or fake clock) keep the
	// protocol's order: the move that starts a call, the call and any
	// event, the move its answer makes, then the operator's record.
	rank := func(e opsEntry) int {
		switch {
		case e.Kind == "transition" && (e.State == string(statemachine.Submitted) || e.State == string(statemachine.Reconciling)):
			return 0
		case e.Kind == "provider" || e.Kind == "webhook":
			return 1
		case e.Kind == "transition":
			return 2
		}
		return 3
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].At.Equal(out[j].At) {
			return out[i].At.Before(out[j].At)
		}
		return rank(out[i]) < rank(out[j])
	})
	return out
}

type opsFlash struct {
	Error bool
	Text  string
}

// opsForm keeps what the operator typed when an action is refused.
type opsForm struct {
	To, Evidence, Note, Override string
	Close                        bool
	// Disagrees is set when the provider refused the resolution: the
	// override field is then shown open, with the provider's answer.
	Disagrees bool
}

type opsCaseData struct {
	opsBase
	P        reconcile.Purchase
	ID       string // path-escaped id, for form actions
	Amount   string
	Age      string
	Final    bool
	Timeline []opsEntry
	// Live is the provider's live view an operator last asked for; nil
	// when nobody has.
	Live       *opsLiveView
	CanResolve bool
	NoResolve  string // why there is no resolve form
	CanClose   bool
	Flash      *opsFlash
	Form       opsForm
	Findings   []opsFindingRow
	OpenFinds  int // how many of Findings are open
	// Refunds are the purchase's refunds, oldest first.
	Refunds []opsRefundRow
	// Disputes are the disputes of the purchase's payments, oldest
	// first, with their histories.
	Disputes []opsDisputeRow
}

func (o *Ops) casePage(w http.ResponseWriter, r *http.Request, who opsWho) {
	var flash *opsFlash
	q := r.URL.Query()
	if msg := q.Get("flash"); msg != "" && hmac.Equal([]byte(q.Get("fs")), []byte(o.flashSig(r.PathValue("id"), msg))) {
		flash = &opsFlash{Text: msg}
	}
	o.showCase(w, r, who, http.StatusOK, flash, opsForm{})
}

// showCase renders a case, or its JSON, with the provider's live view an
// operator last asked for. Showing it never calls the provider: that is
// the "Ask the provider" action's, which spends budget and is recorded.
func (o *Ops) showCase(w http.ResponseWriter, r *http.Request, who opsWho, status int, flash *opsFlash, form opsForm) {
	id := r.PathValue("id")
	asJSON := opsWantsJSON(r)
	c, err := o.svc.Case(r.Context(), id)
	var refunds []reconcile.Refund
	if err == nil {
		refunds, err = o.svc.PurchaseRefunds(r.Context(), id)
	}
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		o.cannotShow(w, r, who, asJSON, reconcile.KindNotFound, "no purchase with id "+quote(id),
			"No such purchase", "There is no purchase with id "+quote(id)+".")
		return
	case err != nil:
		o.log.Error("ops: read case", "purchase", id, "err", err)
		o.cannotShow(w, r, who, asJSON, reconcile.KindInternal, "could not read the purchase",
			"Could not read the purchase", "The purchase could not be read from the database. Reload to try again.")
		return
	}
	live := opsLastLiveView(c)
	if asJSON {
		out := opsCaseToJSON(c, refunds)
		if live != nil {
			out.LiveView = &opsLiveViewJSON{
				Outcome: live.Outcome, Status: live.Status, PaymentID: live.PaymentID, Text: live.Text,
				Error: live.Error, AskedAt: live.At,
			}
		}
		writeJSON(w, status, out)
		return
	}
	p := c.Purchase
	data := opsCaseData{
		opsBase: o.base("Purchase "+p.ID, who), P: p, ID: url.PathEscape(p.ID),
		Amount: provider.FormatAmount(p.Amount, p.Currency), Age: opsAge(c.Age), Final: p.State.Terminal(),
		Timeline: opsTimeline(c), Flash: flash, Form: form, Findings: opsFindingRows(c.Findings),
		Refunds: opsRefundRows(refunds),
	}
	for _, d := range c.Disputes {
		row := opsDisputeRowOf(d.Dispute, c.Now)
		row.Transitions = d.Transitions
		data.Disputes = append(data.Disputes, row)
	}
	for _, f := range c.Findings {
		if f.Open() {
			data.OpenFinds++
		}
	}
	data.Live = live
	switch {
	case p.State.Terminal():
		data.NoResolve = "This purchase is final (" + string(p.State) + "): an operator cannot change a final state. " +
			"If the provider disagrees with it (a contradiction), handle the money outside payrecon, " +
			"then close the escalation with a note."
	case p.State == statemachine.Created && !p.EscalationReason.ChargeMayExist():
		data.NoResolve = "This purchase was never submitted to the provider, so there is no charge to settle. " +
			"Recheck it to let the worker submit it."
	default:
		data.CanResolve = true
	}
	data.CanClose = p.State.Terminal() && p.Escalated()
	o.render(w, status, "case", data)
}

type opsFindingData struct {
	opsBase
	F     opsFindingRow
	Flash *opsFlash
	// Form is what the operator typed, when an action was refused.
	Form opsFindingForm
	// CanRefund is set for an open duplicate charge of a purchase: its
	// page offers "Refund this charge", with RefundAmount (minor units)
	// as the default amount.
	CanRefund    bool
	RefundAmount int64
	// Refunds are the refunds already made for this finding's payment.
	Refunds []opsRefundRow
}

// findingID parses the {fid} of the path; false when it is no finding id.
func findingID(r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("fid"), 10, 64)
	return id, err == nil && id > 0
}

func (o *Ops) findingPage(w http.ResponseWriter, r *http.Request, who opsWho) {
	var flash *opsFlash
	q := r.URL.Query()
	if msg := q.Get("flash"); msg != "" && hmac.Equal([]byte(q.Get("fs")), []byte(o.findingFlashSig(r.PathValue("fid"), msg))) {
		flash = &opsFlash{Text: msg}
	}
	o.showFinding(w, r, who, http.StatusOK, flash, opsFindingForm{})
}

// showFinding renders a finding, or its JSON for script clients, with
// the refunds already made for its payment.
func (o *Ops) showFinding(w http.ResponseWriter, r *http.Request, who opsWho, status int, flash *opsFlash, form opsFindingForm) {
	asJSON := opsWantsJSON(r)
	id, ok := findingID(r)
	var f reconcile.Finding
	var err error
	if ok {
		f, err = o.svc.Finding(r.Context(), id)
	}
	switch {
	case !ok || errors.Is(err, reconcile.ErrNotFound):
		msg := "There is no audit finding with id " + quote(r.PathValue("fid")) + "."
		o.cannotShow(w, r, who, asJSON, reconcile.KindNotFound, msg, "No such finding", msg)
		return
	case err != nil:
		o.log.Error("ops: read finding", "finding", id, "err", err)
		o.cannotShow(w, r, who, asJSON, reconcile.KindInternal, "could not read the finding",
			"Could not read the finding", "The finding could not be read from the database. Reload to try again.")
		return
	}
	if asJSON {
		writeJSON(w, status, opsFindingToJSON(f))
		return
	}
	var refunds []reconcile.Refund
	if f.PurchaseID != "" {
		all, err := o.svc.PurchaseRefunds(r.Context(), f.PurchaseID)
		if err != nil {
			o.log.Error("ops: read a finding's refunds", "finding", id, "err", err)
			o.cannotShow(w, r, who, false, reconcile.KindInternal, "",
				"Could not read the finding", "The finding's refunds could not be read from the database. Reload to try again.")
			return
		}
		for _, rf := range all {
			if rf.FindingID == f.ID {
				refunds = append(refunds, rf)
			}
		}
	}
	rows := opsFindingRows([]reconcile.Finding{f})
	o.render(w, status, "finding", opsFindingData{
		opsBase: o.base("Audit finding "+strconv.FormatInt(f.ID, 10), who), F: rows[0], Flash: flash, Form: form,
		CanRefund:    f.Open() && f.Kind == reconcile.FindingDuplicateCharge && f.PurchaseID != "",
		RefundAmount: f.Amount, Refunds: opsRefundRows(refunds),
	})
}

// opsLiveView is a live view of the provider as the purchase's audit
// recorded it.
type opsLiveView struct {
	At                                time.Time
	Outcome, Status, PaymentID, Error string
	Text                              string // as reconcile.DescribeView words it
}

// opsLastLiveView returns the latest live view an operator asked for, from
// the case's recorded attempts, or nil.
func opsLastLiveView(c reconcile.Case) *opsLiveView {
	for i := len(c.Attempts) - 1; i >= 0; i-- {
		a := c.Attempts[i]
		if a.Actor != reconcile.LiveViewActor {
			continue
		}
		return &opsLiveView{
			At: a.At, Outcome: string(a.Outcome), Status: a.Status, PaymentID: a.PaymentID, Error: a.Error,
			Text: reconcile.DescribeView(provider.Result{Outcome: a.Outcome, Status: a.Status, PaymentID: a.PaymentID, Reason: a.Error}),
		}
	}
	return nil
}
