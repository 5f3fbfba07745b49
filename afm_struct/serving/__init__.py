"""The protocol-neutral core's values: what a request asks for and what its run yields.

A protocol adapter reads its request into a :class:`~.plan.GenerationPlan`; the server's core
admits and runs the plan and yields typed events (:mod:`.events`); a protocol encoder writes
them in its own wire shape.  Nothing here knows HTTP, pydantic or a protocol's shapes; field
names appear only as the request paths adapters hand over for errors (:class:`~.plan.RequestPaths`).

Import from the submodules: :mod:`.events` stays free of MLX (the wire encoders import it),
:mod:`.plan` holds engine values (sampling parameters, tool definitions).
"""
