package fakeprovider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// dropConnection closes the request's connection without an answer: a
// lost reply. Where the connection cannot be hijacked (HTTP/2), the
// handler aborts, which resets the stream.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	conn.Close()
}

// Wire format.

// paymentIntent is a PaymentIntent as Stripe renders it, with the fields
// a fake can fill.
type paymentIntent struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCapturable   int64             `json:"amount_capturable"`
	AmountReceived     int64             `json:"amount_received"`
	CanceledAt         *int64            `json:"canceled_at"`
	CancellationReason *string           `json:"cancellation_reason"`
	CaptureMethod      string            `json:"capture_method"`
	ClientSecret       string            `json:"client_secret"`
	ConfirmationMethod string            `json:"confirmation_method"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Customer           *string           `json:"customer"`
	Description        *string           `json:"description"`
	LastPaymentError   *apiError         `json:"last_payment_error"`
	LatestCharge       *string           `json:"latest_charge"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	NextAction         *nextAction       `json:"next_action"`
	PaymentMethod      *string           `json:"payment_method"`
	PaymentMethodTypes []string          `json:"payment_method_types"`
	Status             string            `json:"status"`
}

// nextAction is a PaymentIntent's next_action: what the customer must do.
type nextAction struct {
	Type string `json:"type"`
}

// apiError is a Stripe error object, as in {"error": ...} and in a
// PaymentIntent's last_payment_error.
type apiError struct {
	Type          string         `json:"type"`
	Code          string         `json:"code,omitempty"`
	DeclineCode   string         `json:"decline_code,omitempty"`
	DocURL        string         `json:"doc_url,omitempty"`
	Message       string         `json:"message"`
	Param         string         `json:"param,omitempty"`
	Charge        string         `json:"charge,omitempty"`
	PaymentIntent *paymentIntent `json:"payment_intent,omitempty"`
}

type errorBody struct {
	Error apiError `json:"error"`
}

// listResult is a list object as Stripe renders it.
type listResult struct {
	Object  string          `json:"object"`
	URL     string          `json:"url"`
	HasMore bool            `json:"has_more"`
	Data    []paymentIntent `json:"data"`
}

type searchResult struct {
	Object   string          `json:"object"`
	URL      string          `json:"url"`
	HasMore  bool            `json:"has_more"`
	NextPage *string         `json:"next_page"`
	Data     []paymentIntent `json:"data"`
}

// refundObject is a Refund as Stripe renders it, with the fields a fake
// can fill.
type refundObject struct {
	ID                     string            `json:"id"`
	Object                 string            `json:"object"`
	Amount                 int64             `json:"amount"`
	BalanceTransaction     *string           `json:"balance_transaction"`
	Charge                 string            `json:"charge"`
	Created                int64             `json:"created"`
	Currency               string            `json:"currency"`
	FailureReason          *string           `json:"failure_reason,omitempty"`
	Metadata               map[string]string `json:"metadata"`
	NextAction             *nextAction       `json:"next_action,omitempty"`
	PaymentIntent          string            `json:"payment_intent"`
	Reason                 *string           `json:"reason"`
	ReceiptNumber          *string           `json:"receipt_number"`
	SourceTransferReversal *string           `json:"source_transfer_reversal"`
	Status                 string            `json:"status"`
	TransferReversal       *string           `json:"transfer_reversal"`
}

// renderRefund renders r as a Refund in status.
func renderRefund(r Refund, status string) refundObject {
	o := refundObject{
		ID:            r.ID,
		Object:        "refund",
		Amount:        r.Amount,
		Charge:        latestCharge(r.PaymentID),
		Created:       r.CreatedAt.Unix(),
		Currency:      r.Currency,
		Metadata:      refundMetadataOf(r),
		PaymentIntent: r.PaymentID,
		Status:        status,
	}
	if r.Reason != "" {
		o.Reason = &r.Reason
	}
	if status == RefundStatusSucceeded {
		txn := "txn_" + strings.TrimPrefix(r.ID, "re_")
		o.BalanceTransaction = &txn
	}
	if refundGone(status) && r.FailureReason != "" {
		o.FailureReason = &r.FailureReason
	}
	if status == RefundStatusRequiresAction {
		o.NextAction = &nextAction{Type: "display_details"}
	}
	return o
}

// refundMetadataOf returns the metadata provider/stripe sets on r.
func refundMetadataOf(r Refund) map[string]string {
	md := map[string]string{}
	if r.RefundID != "" {
		md["refund_id"] = r.RefundID
	}
	if r.PurchaseID != "" {
		md["purchase_id"] = r.PurchaseID
	}
	return md
}

// chargeObject is a Charge as Stripe renders it (the one charge of a
// PaymentIntent the fake made), with its refunds expanded, as in a
// charge.refunded event that carries them.
type chargeObject struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountCaptured int64             `json:"amount_captured"`
	AmountRefunded int64             `json:"amount_refunded"`
	Captured       bool              `json:"captured"`
	Created        int64             `json:"created"`
	Currency       string            `json:"currency"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Paid           bool              `json:"paid"`
	PaymentIntent  string            `json:"payment_intent"`
	Refunded       bool              `json:"refunded"`
	Refunds        refundList        `json:"refunds"`
	Status         string            `json:"status"`
}

// refundList is a list of Refunds as Stripe renders it.
type refundList struct {
	Object  string         `json:"object"`
	URL     string         `json:"url"`
	HasMore bool           `json:"has_more"`
	Data    []refundObject `json:"data"`
}

// renderCharge renders c's charge with its refunds, oldest first as
// given, listed newest first as Stripe lists them. amount_refunded counts
// the refunds that hold part of the payment (pending ones too), as
// Stripe's does.
func renderCharge(c Charge, refunds []Refund) chargeObject {
	o := chargeObject{
		ID:             latestCharge(c.ID),
		Object:         "charge",
		Amount:         c.Amount,
		AmountCaptured: c.Amount,
		Captured:       true,
		Created:        c.CreatedAt.Unix(),
		Currency:       c.Currency,
		Metadata:       metadataOf(c),
		Paid:           true,
		PaymentIntent:  c.ID,
		Status:         "succeeded",
		Refunds:        refundList{Object: "list", URL: "/v1/charges/" + latestCharge(c.ID) + "/refunds", Data: []refundObject{}},
	}
	for _, r := range slices.Backward(refunds) {
		o.Refunds.Data = append(o.Refunds.Data, renderRefund(r, r.Status))
		if r.holds() {
			o.AmountRefunded += r.Amount
		}
	}
	o.Refunded = o.AmountRefunded >= c.Amount
	return o
}

// renderPI renders c as a PaymentIntent in status.
func renderPI(c Charge, status string) paymentIntent {
	charge := latestCharge(c.ID)
	pi := paymentIntent{
		ID:                 c.ID,
		Object:             "payment_intent",
		Amount:             c.Amount,
		CaptureMethod:      "automatic",
		ClientSecret:       c.ID + "_secret_" + clientSecretOf(c.ID),
		ConfirmationMethod: "automatic",
		Created:            c.CreatedAt.Unix(),
		Currency:           c.Currency,
		LatestCharge:       &charge,
		Metadata:           metadataOf(c),
		PaymentMethod:      &c.PaymentMethod,
		PaymentMethodTypes: []string{"card"},
		Status:             status,
	}
	if c.Description != "" {
		pi.Description = &c.Description
	}
	if c.PaymentMethod == "" {
		pi.PaymentMethod = nil
	}
	switch status {
	case StatusSucceeded:
		pi.AmountReceived = c.Amount
	case StatusRequiresAction:
		// 3-D Secure, for the customer's browser or app to handle.
		pi.NextAction = &nextAction{Type: "use_stripe_sdk"}
	case StatusRequiresPaymentMethod:
		e := cardError(c)
		pi.LastPaymentError = &e
	case StatusCanceled:
		at := c.CreatedAt
		if !c.MovedAt.IsZero() {
			at = c.MovedAt
		}
		sec := at.Unix()
		pi.CanceledAt = &sec
	}
	return pi
}

// cardError is the card error of c's decline.
func cardError(c Charge) apiError {
	if c.DeclineCode == DeclineAuthenticationRequired {
		return apiError{
			Type:        "card_error",
			Code:        DeclineAuthenticationRequired,
			DeclineCode: DeclineAuthenticationRequired,
			DocURL:      "https://stripe.com/docs/error-codes/authentication-required",
			Message:     "Your card was declined. This transaction requires authentication.",
			Charge:      latestCharge(c.ID),
		}
	}
	code := c.DeclineCode
	if code == "" {
		code = DeclineCode
	}
	return apiError{
		Type:        "card_error",
		Code:        code,
		DeclineCode: WireDeclineCode,
		DocURL:      "https://stripe.com/docs/error-codes/card-declined",
		Message:     "Your card was declined.",
		Charge:      latestCharge(c.ID),
	}
}

// clientSecretOf returns the secret part of the client secret of the
// PaymentIntent piID: letters and digits, as Stripe's (which
// provider/stripe's redaction relies on).
func clientSecretOf(piID string) string {
	return strings.ReplaceAll(strings.TrimPrefix(piID, "pi_"), "_", "")
}

func latestCharge(piID string) string { return "ch_" + strings.TrimPrefix(piID, "pi_") }

// metadataOf returns the metadata provider/stripe sets on c.
func metadataOf(c Charge) map[string]string {
	md := map[string]string{}
	if c.PurchaseID != "" {
		md["purchase_id"] = c.PurchaseID
	}
	if c.Customer != "" {
		md["customer_ref"] = c.Customer
	}
	return md
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	writeJSON(w, status, errorBody{e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil { // plain structs: cannot fail
		panic(fmt.Sprintf("fakeprovider: marshal %T: %v", v, err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}
