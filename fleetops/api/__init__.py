"""The fleet API (`fleetops serve`): the environment at one Git revision, read only, over HTTP.

snapshot: the revision loaded whole; models: what the API answers (its OpenAPI document is made of
them); quote: a proposed change judged as `plan` judges it; auth: bearer tokens and their scopes;
app: the routes, errors as problem+json, limits.
"""
