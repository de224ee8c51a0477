-- Argo CD health of a conveyor.dev MessageQueueTopic: Healthy when its queues are as declared,
-- Progressing while they grow, drain or shrink (or before the operator has seen the spec),
-- Suspended while paused, Degraded when the cluster or its brokers cannot be reached or the
-- change was refused.
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
    local message = cond.message or ""
    if cond.status == "True" then
      return { status = "Healthy", message = message }
    end
    if cond.reason == "Paused" then
      return { status = "Suspended", message = message }
    end
    if cond.reason == "Growing" or cond.reason == "Draining" or cond.reason == "Shrinking" then
      return { status = "Progressing", message = message }
    end
    return { status = "Degraded", message = message }
  end
end
return hs
