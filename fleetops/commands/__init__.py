"""The arguments of every command, one module per job: `fleet` (the environment files and the policies), `change`
(plan, whatif and CI's approvals and note), `report` (audit, statements), `live` (reconcile, why, standing,
deploy), `serve`; `base` holds what they share. `fleetops.cli` registers them on its one app."""
