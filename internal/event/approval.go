package event

// ApprovalState is where a held request's approval record stands. Only pending changes,
// and only once; each final state says who or what ended the request. The approval
// package's State is this type; telemetry labels an approval wait with it.
type ApprovalState string

const (
	ApprovalPending  ApprovalState = "pending"
	ApprovalApproved ApprovalState = "approved" // an approver (or the approval service) said yes
	ApprovalDenied   ApprovalState = "denied"   // an approver (or the approval service) said no
	// ApprovalCancelled: an approver withdrew the request without judging it (POST …/cancel).
	ApprovalCancelled ApprovalState = "cancelled"
	ApprovalExpired   ApprovalState = "expired" // nobody decided before the timeout
	// ApprovalDisconnected: the agent's connection went away while the request was held.
	ApprovalDisconnected ApprovalState = "disconnected"
)

// Valid reports whether s is one of the states above.
func (s ApprovalState) Valid() bool {
	switch s {
	case ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalCancelled, ApprovalExpired, ApprovalDisconnected:
		return true
	}
	return false
}

// ByApprover reports whether a person or the approval service ended the record (approved,
// denied, cancelled), as opposed to airlock itself (expired, disconnected).
func (s ApprovalState) ByApprover() bool {
	return s == ApprovalApproved || s == ApprovalDenied || s == ApprovalCancelled
}
