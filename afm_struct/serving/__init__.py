"""One request as the engine serves it, whatever protocol carried it: the generation plan.

A protocol adapter reads its request into a :class:`~.plan.GenerationPlan`; the server's core
admits and runs the plan; what the run yields is in :mod:`afm_struct.turn.events`.  Nothing
here knows HTTP, pydantic or a protocol's shapes; field names appear only as the request paths
adapters hand over for errors (:class:`~.plan.RequestPaths`).  :mod:`.value_checks` refuses
input no tokenizer or grammar engine can take (lone surrogates, NaN) where a request comes in.
"""
