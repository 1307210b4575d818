"""The fleet's components, one per fleet concept, as plain data (`modules.fleet`) that
`modules.program` registers with Pulumi."""
