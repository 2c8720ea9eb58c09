-- enough-sources: true once the sub-agent fetched at least max_sources
-- sources (successful http_get calls) in this task.
local fetched = 0
for _, call in ipairs(context.history.tools) do
  if call.name == "http_get" and call.success then
    fetched = fetched + 1
  end
end
return context.result.name == "http_get" and fetched >= context.settings.max_sources
