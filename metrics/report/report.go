// Package report is the engine of `respmeter report`: it prints percentile
// tables of HdrHistogram interval logs (Table, as package metrics/hdrlog
// loads them, each tag's intervals merged), compares two logs (Compare) or
// plots percentile distributions (Plot).
//
// Histogram values in the logs are microseconds, as respmeter records them;
// the tables and plots show milliseconds.
package report
