"""The Responses API (``POST /v1/responses``): its request (:mod:`.schemas`), the adapter to the
generation plan (:mod:`.adapter`, input items in :mod:`.items`, tools in :mod:`.tools`), the
encoder of run events into its streaming events and response object (:mod:`.encoder`, shapes
in :mod:`.shapes`), the stored-response seam (:mod:`.storage`) and its routes (:mod:`.routes`)."""
