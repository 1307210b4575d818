"""`fleetops whatif`: what a configuration does to the fleet's work, a trace of jobs replayed on the real Kueue per side."""
