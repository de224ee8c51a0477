-- Argo CD health of a conveyor.dev MessageQueueUser: Healthy once its credentials Secret exists
-- and the cluster's users file lists it (Ready), Degraded when the operator says why not,
-- Progressing before the operator has seen the latest spec.
local hs = { status = "Progressing", message = "Waiting for the operator" }
if obj.status == nil then
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= nil
    and obj.status.observedGeneration < obj.metadata.generation then
  hs.message = "The operator has not acted on the latest spec yet"
  return hs
end
for _, cond in ipairs(obj.status.conditions or {}) do
  if cond.type == "Ready" then
    if cond.status == "True" then
      return { status = "Healthy", message = cond.message or "" }
    end
    return { status = "Degraded", message = cond.message or cond.reason or "" }
  end
end
return hs
