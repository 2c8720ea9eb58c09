package server

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/loomdb/loom/triggers"
)

// Routes of the triggers admin API (README, "Triggers and webhooks").
const (
	routeTriggers   = "/admin/v1/triggers"
	routeDeliveries = "/admin/v1/deliveries"
)

func (s *Server) triggerRoutes(r *gin.Engine) {
	t := r.Group(routeTriggers, s.authenticate, s.requireAdmin, s.triggersEnabled)
	t.GET("", s.listTriggers)
	t.POST("", s.registerTrigger)
	t.POST("/reload", s.reloadTriggers)
	t.GET("/:id", s.getTrigger)
	t.PUT("/:id", s.updateTrigger)
	t.DELETE("/:id", s.deleteTrigger)
	t.POST("/:id/enable", s.switchTrigger(true))
	t.POST("/:id/disable", s.switchTrigger(false))
	t.POST("/:id/rotate-secret", s.rotateSecret)

	d := r.Group(routeDeliveries, s.authenticate, s.requireAdmin, s.triggersEnabled)
	d.GET("", s.listDeliveries)
	d.POST("/:id/replay", s.replayDelivery)
	d.POST("/:id/cancel", s.cancelDelivery)
}

// triggersEnabled answers 404 when the server runs without the trigger
// pipeline.
func (s *Server) triggersEnabled(c *gin.Context) {
	if s.triggers == nil {
		s.writeError(c, errorf(http.StatusNotFound, codeNotFound, "Triggers are not enabled on this server."))
		return
	}
	c.Next()
}

// triggerView is a trigger in an admin response; Secret is set only when
// it is shown (once).
type triggerView struct {
	triggers.Info
	Secret string `json:"secret,omitempty"`
}

func (s *Server) listTriggers(c *gin.Context) {
	list, secrets, err := s.triggers.List(c.Request.Context())
	if err != nil {
		s.writeError(c, err)
		return
	}
	out := make([]triggerView, len(list))
	for i, in := range list {
		out[i] = triggerView{Info: in, Secret: secrets[in.ID]}
	}
	c.JSON(http.StatusOK, gin.H{"triggers": out})
}

func (s *Server) getTrigger(c *gin.Context) {
	in, secret, err := s.triggers.Get(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, triggerView{Info: in, Secret: secret})
}

// readTrigger decodes a trigger definition; unknown keys are an error.
func (s *Server) readTrigger(c *gin.Context) (triggers.Trigger, error) {
	var def triggers.Trigger
	body, err := s.readBody(c)
	if err != nil {
		return def, err
	}
	defer putBuf(body)
	dec := json.NewDecoder(bytes.NewReader(body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&def); err != nil {
		return def, errorf(http.StatusBadRequest, codeBadRequest, "The body must be one trigger definition: %s.", err.Error())
	}
	if dec.More() {
		return def, errorf(http.StatusBadRequest, codeBadRequest, "Unexpected data after the trigger definition.")
	}
	return def, nil
}

func (s *Server) registerTrigger(c *gin.Context) {
	def, err := s.readTrigger(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	in, secret, err := s.triggers.Register(c.Request.Context(), def)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.Header("Location", routeTriggers+"/"+in.ID)
	c.JSON(http.StatusCreated, triggerView{Info: in, Secret: secret})
}

func (s *Server) updateTrigger(c *gin.Context) {
	def, err := s.readTrigger(c)
	if err != nil {
		s.writeError(c, err)
		return
	}
	in, err := s.triggers.Update(c.Request.Context(), c.Param("id"), def)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, triggerView{Info: in})
}

func (s *Server) deleteTrigger(c *gin.Context) {
	if err := s.triggers.Delete(c.Request.Context(), c.Param("id")); err != nil {
		s.writeError(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func (s *Server) switchTrigger(on bool) gin.HandlerFunc {
	return func(c *gin.Context) {
		ctx, id := c.Request.Context(), c.Param("id")
		var err error
		if on {
			err = s.triggers.Enable(ctx, id)
		} else {
			err = s.triggers.Disable(ctx, id)
		}
		if err != nil {
			s.writeError(c, err)
			return
		}
		s.getTrigger(c)
	}
}

func (s *Server) rotateSecret(c *gin.Context) {
	secret, err := s.triggers.RotateSecret(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.writeError(c, err)
		return
	}
	in, _, err := s.triggers.Get(c.Request.Context(), c.Param("id"))
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, triggerView{Info: in, Secret: secret})
}

func (s *Server) reloadTriggers(c *gin.Context) {
	if err := s.triggers.Reload(c.Request.Context()); err != nil {
		s.writeError(c, err)
		return
	}
	// Len, not List: listing shows (and so uses up) never-shown secrets.
	res := gin.H{"triggers": s.triggers.Len()}
	if s.triggers.Builtin() {
		res["builtin"] = true // no file to re-read: the built-in triggers stay
	}
	c.JSON(http.StatusOK, res)
}

func (s *Server) listDeliveries(c *gin.Context) {
	dq := triggers.DeliveryQuery{
		TriggerID: c.Query("triggerId"),
		Status:    c.Query("status"),
		Cursor:    c.Query("cursor"),
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.writeError(c, errorf(http.StatusBadRequest, codeBadRequest, "limit must be a positive integer."))
			return
		}
		dq.Limit = n
	}
	list, next, err := s.triggers.Deliveries(c.Request.Context(), dq)
	if err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"deliveries": list, "nextCursor": next})
}

func (s *Server) replayDelivery(c *gin.Context) {
	if err := s.triggers.Replay(c.Request.Context(), c.Param("id")); err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusAccepted, gin.H{"id": c.Param("id"), "status": triggers.StatusPending})
}

func (s *Server) cancelDelivery(c *gin.Context) {
	if err := s.triggers.Cancel(c.Request.Context(), c.Param("id")); err != nil {
		s.writeError(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"id": c.Param("id"), "status": triggers.StatusCanceled})
}
