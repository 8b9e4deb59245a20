"""Scale-out on PostgreSQL: a fleet of agent workers fed by a queue, and projection processes.

- ``jobs``: ``SessionJob``, what a queued job asks a worker to do with one session.
- ``queue``: ``FleetQueue``, the procrastinate queue in the same database as the events.
- ``worker``: ``FleetWorker``, takes jobs, advances sessions, recovers crashed workers' jobs.
- ``script``: a scripted provider keyed by the session's step, so a resumed session continues
  its script where the crashed worker left it.
- ``summary`` / ``projection``: the "sessions summary" read model and the process that follows the
  notification log to maintain it.
- ``audit``: checks over the whole store that no event was lost or duplicated.

See docs/postgres.md for how to run it and what each part guarantees.
"""
