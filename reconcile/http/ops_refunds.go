package http

import (
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/payrecon/payrecon/provider"
	"github.com/payrecon/payrecon/reconcile"
	"github.com/payrecon/payrecon/statemachine"
)

// The operator pages' refunds: the escalated refunds beside the escalated
// purchases, a refund's page, a purchase's refunds on its case page, and
// the one operator action that moves money, "Refund this charge" on an
// open duplicate-charge finding. It goes through the refund process like
// any other refund (reconcile.Service.RefundCharge): its own id, key and
// states, reconciled by the worker. Nothing here charges.

// opsRefundRow is a refund as the pages list it.
type opsRefundRow struct {
	ID, PurchaseID, PaymentID, Amount, Reason, State string
	RequestedBy, EscalationReason, Age               string
	Account                                          string // "platform" or acct_…
	FindingID                                        int64
	CreatedAt, SettledAt, EscalatedAt                time.Time
}

func opsRefundRowOf(r reconcile.Refund, age time.Duration) opsRefundRow {
	return opsRefundRow{
		ID: r.ID, PurchaseID: r.PurchaseID, PaymentID: r.PaymentID, Amount: provider.FormatAmount(r.Amount, r.Currency),
		Account: reconcile.AccountLabel(r.Account()), Reason: r.Reason, State: string(r.State), RequestedBy: r.RequestedBy,
		EscalationReason: string(r.EscalationReason), Age: opsAge(age), FindingID: r.FindingID,
		CreatedAt: r.CreatedAt, SettledAt: r.SettledAt, EscalatedAt: r.EscalatedAt,
	}
}

func opsRefundRows(rs []reconcile.Refund) []opsRefundRow {
	out := make([]opsRefundRow, 0, len(rs))
	for _, r := range rs {
		out = append(out, opsRefundRowOf(r, 0))
	}
	return out
}

// opsRefundJSON is a refund in the operator pages' JSON.
type opsRefundJSON struct {
	RefundID         string     `json:"refund_id"`
	PurchaseID       string     `json:"purchase_id"`
	Account          string     `json:"account"` // "platform" or acct_…
	PaymentID        string     `json:"payment_id"`
	FindingID        int64      `json:"finding_id,omitempty"`
	Amount           int64      `json:"amount"`
	Currency         string     `json:"currency"`
	AmountDisplay    string     `json:"amount_display"`
	Reason           string     `json:"reason"`
	RequestedBy      string     `json:"requested_by,omitempty"`
	State            string     `json:"state"`
	Final            bool       `json:"final"`
	Version          int64      `json:"version"`
	ProviderKey      string     `json:"provider_key"`
	ProviderRefundID string     `json:"provider_refund_id,omitempty"`
	FailureReason    string     `json:"failure_reason,omitempty"`
	Escalated        bool       `json:"escalated"`
	EscalationReason string     `json:"escalation_reason,omitempty"`
	EscalatedAt      *time.Time `json:"escalated_at"`
	UncertainSince   *time.Time `json:"uncertain_since"`
	SettledAt        *time.Time `json:"settled_at"`
	CreatedAt        time.Time  `json:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
}

func opsRefundToJSON(r reconcile.Refund) opsRefundJSON {
	return opsRefundJSON{
		RefundID: r.ID, PurchaseID: r.PurchaseID, Account: reconcile.AccountLabel(r.Account()), PaymentID: r.PaymentID, FindingID: r.FindingID,
		Amount: r.Amount, Currency: r.Currency, AmountDisplay: provider.FormatAmount(r.Amount, r.Currency), Reason: r.Reason,
		RequestedBy: r.RequestedBy, State: string(r.State), Final: statemachine.Refund.Terminal(r.State),
		Version: r.Version, ProviderKey: r.ProviderKey, ProviderRefundID: r.ProviderRefundID,
		FailureReason: r.FailureReason, Escalated: r.Escalated(), EscalationReason: string(r.EscalationReason),
		EscalatedAt: opsTimePtr(r.EscalatedAt), UncertainSince: opsTimePtr(r.UncertainSince),
		SettledAt: opsTimePtr(r.SettledAt), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

func opsRefundsToJSON(rs []reconcile.Refund) []opsRefundJSON {
	out := make([]opsRefundJSON, 0, len(rs))
	for _, r := range rs {
		out = append(out, opsRefundToJSON(r))
	}
	return out
}

// opsRefundCaseJSON is one refund's page as JSON: the refund, its age and
// its whole record.
type opsRefundCaseJSON struct {
	opsRefundJSON
	AgeSeconds      int64            `json:"age_seconds"`
	Age             string           `json:"age"`
	Transitions     []transitionJSON `json:"transitions"`
	Attempts        []attemptJSON    `json:"attempts"`
	OperatorActions []opsActionJSON  `json:"operator_actions"`
	Finding         *opsFindingJSON  `json:"finding,omitempty"`
}

func opsRefundCaseToJSON(c reconcile.RefundCase) opsRefundCaseJSON {
	out := opsRefundCaseJSON{
		opsRefundJSON: opsRefundToJSON(c.Refund), AgeSeconds: int64(c.Age / time.Second), Age: opsAge(c.Age),
		Transitions: toTransitionsJSON(c.Transitions), Attempts: toAttemptsJSON(c.Attempts),
		OperatorActions: []opsActionJSON{},
	}
	for _, a := range c.Actions {
		out.OperatorActions = append(out.OperatorActions, opsActionJSON{
			Operator: a.Operator, Action: a.Action, Saw: a.Saw, Did: a.Did, Evidence: a.Evidence, At: a.At,
		})
	}
	if c.Finding != nil {
		f := opsFindingToJSON(*c.Finding)
		out.Finding = &f
	}
	return out
}

// refundFlashSig signs a flash message for a refund's page, apart from
// those of purchase and finding pages.
func (o *Ops) refundFlashSig(rid, msg string) string {
	return base64.RawURLEncoding.EncodeToString(o.sign("flash refund", rid, msg)[:16])
}

type opsRefundData struct {
	opsBase
	R        opsRefundRow
	Refund   reconcile.Refund
	Purchase reconcile.Purchase
	Finding  *opsFindingRow
	Final    bool
	Timeline []opsEntry
	Flash    *opsFlash
}

// refundPage shows one refund: its facts and its timeline, or its JSON
// for script clients. It offers no action: the worker reconciles a
// refund, and an uncertain one is never refunded again.
func (o *Ops) refundPage(w http.ResponseWriter, r *http.Request, who opsWho) {
	id := r.PathValue("rid")
	asJSON := opsWantsJSON(r)
	c, err := o.svc.RefundCase(r.Context(), id)
	switch {
	case errors.Is(err, reconcile.ErrNotFound):
		o.cannotShow(w, r, who, asJSON, reconcile.KindNotFound, "no refund with id "+quote(id),
			"No such refund", "There is no refund with id "+quote(id)+".")
		return
	case err != nil:
		o.log.Error("ops: read refund", "refund", id, "err", err)
		o.cannotShow(w, r, who, asJSON, reconcile.KindInternal, "could not read the refund",
			"Could not read the refund", "The refund could not be read from the database. Reload to try again.")
		return
	}
	if asJSON {
		writeJSON(w, http.StatusOK, opsRefundCaseToJSON(c))
		return
	}
	var flash *opsFlash
	q := r.URL.Query()
	if msg := q.Get("flash"); msg != "" && hmac.Equal([]byte(q.Get("fs")), []byte(o.refundFlashSig(id, msg))) {
		flash = &opsFlash{Text: msg}
	}
	data := opsRefundData{
		opsBase: o.base("Refund "+c.Refund.ID, who), R: opsRefundRowOf(c.Refund, c.Age), Refund: c.Refund,
		Purchase: c.Purchase, Final: statemachine.Refund.Terminal(c.Refund.State), Flash: flash,
		Timeline: opsTimeline(reconcile.Case{
			Detail:  reconcile.Detail{Transitions: c.Transitions, Attempts: c.Attempts},
			Actions: c.Actions,
		}),
	}
	if c.Finding != nil {
		data.Finding = &opsFindingRows([]reconcile.Finding{*c.Finding})[0]
	}
	o.render(w, http.StatusOK, "refund", data)
}

// opsFindingForm keeps what the operator typed on a finding's page when
// an action was refused: the close note, or the refund's amount and
// evidence.
type opsFindingForm struct {
	Note             string
	Amount, Evidence string
}

// refundCharge is "Refund this charge": it refunds the payment of an
// open duplicate-charge finding, amount (minor units; the finding's
// amount when empty) with the operator's evidence, through the refund
// process (reconcile.Service.RefundCharge), and shows the new refund.
func (o *Ops) refundCharge(w http.ResponseWriter, r *http.Request, who opsWho) {
	notFound := "There is no audit finding with id " + quote(r.PathValue("fid")) + "."
	fid, ok := findingID(r)
	if !ok {
		o.refuse(w, r, who, reconcile.KindNotFound, notFound)
		return
	}
	evidence, bad := opsCheckText("evidence", r.PostForm.Get("evidence"))
	if bad == "" && evidence == "" {
		bad = "evidence: is required: say what shows the charge is a duplicate (the dashboard entry, the customer's statement)"
	}
	if bad != "" {
		o.refuse(w, r, who, reconcile.KindInvalid, "Not done: "+bad)
		return
	}
	var amount int64
	if a := strings.TrimSpace(r.PostForm.Get("amount")); a != "" {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n <= 0 {
			o.refuse(w, r, who, reconcile.KindInvalid,
				"Not done: amount: "+quote(a)+" is not a positive whole number of minor units (leave it empty to refund the whole charge)")
			return
		}
		amount = n
	}
	ref, err := o.svc.RefundCharge(r.Context(), fid, amount, who.Operator, evidence)
	if err != nil {
		switch k := reconcile.KindOf(err); k {
		case reconcile.KindNotFound:
			o.refuse(w, r, who, k, notFound)
		case reconcile.KindConflict:
			o.actionError(w, r, who, statusOf(k), "already_closed",
				"Not done: the finding is closed; a closed finding's charge is not refunded from here. Nothing changed.")
		case reconcile.KindInvalid:
			o.refuse(w, r, who, k, "Not done: "+opsInvalid(err))
		case reconcile.KindRefundExceeds:
			o.refuse(w, r, who, k, "Not done: the refunds of this charge, pending ones included, would exceed its amount ("+
				errDetail(err)+"). Look at the refunds already made for it. Nothing changed.")
		case reconcile.KindNotRefundable:
			o.refuse(w, r, who, k, "Not done: this charge cannot be refunded from its finding ("+errDetail(err)+"). Nothing changed.")
		case reconcile.KindDisputed:
			o.refuse(w, r, who, k, "Not done: the charge is disputed ("+errDetail(err)+"). Answer the dispute in the provider's dashboard; nothing changed.")
		case reconcile.KindDuplicate:
			o.refuse(w, r, who, k, "Not done: "+errDetail(err)+". Nothing changed; follow that refund on its page.")
		default:
			o.log.Error("ops: refund charge", "finding", fid, "operator", who.Operator, "err", err)
			o.refuse(w, r, who, reconcile.KindInternal, "Not done: an internal error stopped the refund. Nothing was stored; reload the page and look before trying again.")
		}
		return
	}
	o.log.Warn("ops: refund of a charge started", "finding", fid, "refund", ref.ID, "payment", ref.PaymentID,
		"amount", provider.FormatAmount(ref.Amount, ref.Currency), "operator", who.Operator)
	msg := fmt.Sprintf("Refund %s of %s from payment %s started by %s. The worker sends it to the provider and reconciles it; close the finding once it has succeeded.",
		ref.ID, provider.FormatAmount(ref.Amount, ref.Currency), ref.PaymentID, who.Operator)
	if opsWantsJSON(r) {
		writeJSON(w, http.StatusCreated, map[string]any{"message": msg, "refund": opsRefundToJSON(ref)})
		return
	}
	q := url.Values{"flash": {msg}, "fs": {o.refundFlashSig(ref.ID, msg)}}
	http.Redirect(w, r, "/ops/refunds/"+url.PathEscape(ref.ID)+"?"+q.Encode(), http.StatusSeeOther)
}
