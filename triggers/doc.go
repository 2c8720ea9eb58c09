// Package triggers evaluates committed changes against triggers and
// delivers matches as signed webhooks.
package triggers
