-- Argo CD health of a conveyor.dev ConsumerAutoscaler: Suspended while paused, Degraded while
-- the backlog cannot be read (MetricsAvailable=False: it holds or falls back), Healthy
-- otherwise, whether it is scaled to zero or active (Active says which), Progressing before
-- the operator has seen the latest spec.
local hs = { status = "Progressing", message = "Waiting for the operator" }
if obj.status == nil then
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= nil
    and obj.status.observedGeneration < obj.metadata.generation then
  hs.message = "The operator has not acted on the latest spec yet"
  return hs
end
local c = {}
for _, cond in ipairs(obj.status.conditions or {}) do
  c[cond.type] = cond
end
if c.Paused ~= nil and c.Paused.status == "True" then
  return { status = "Suspended", message = c.Paused.message or "Paused" }
end
if c.MetricsAvailable ~= nil and c.MetricsAvailable.status == "False" then
  return { status = "Degraded", message = c.MetricsAvailable.message or "The backlog cannot be read" }
end
if c.MetricsAvailable ~= nil and c.MetricsAvailable.status == "True" then
  local active = c.Active ~= nil and c.Active.message or ""
  return { status = "Healthy", message = active }
end
return hs
